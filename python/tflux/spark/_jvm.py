"""The JVM reader's jar: built from the Java sources shipped in this package (``jvm/``) with the
JDK's ``javac`` and ``jar`` against the jars of the installed pyspark, on first use, into a
per-user cache keyed by the sources' hash and the Spark version. No Maven, no download; a
machine without a JDK gets ``None`` from :func:`jar_path` and the Python sources serve.

Nothing here imports pyspark at module level.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCES = Path(__file__).parent / "jvm"
# Loaded from the session's class path to tell whether the JVM reader serves "tflux".
PROVIDER = "io.tflux.spark.LogSource"


class JarBuildError(RuntimeError):
    """The jar could not be built (no JDK, or javac failed)."""


def _source_files() -> list[Path]:
    """What the jar is built from (and its cache key hashes): the Java sources and
    ``META-INF``; notes beside them (``jvm/README.md``) are neither compiled nor hashed."""
    return sorted(
        p
        for p in SOURCES.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and (p.suffix == ".java" or p.relative_to(SOURCES).parts[0] == "META-INF")
    )


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _tool(name: str) -> str | None:
    """``javac``/``jar`` from ``$JAVA_HOME/bin``, else PATH (``TFLUX_JAVAC`` overrides javac)."""
    if name == "javac" and os.environ.get("TFLUX_JAVAC"):
        found = shutil.which(os.environ["TFLUX_JAVAC"])
        return found
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = Path(home) / "bin" / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def cache_key() -> str:
    """sha256 of the Java sources (names and bytes) and the pyspark version."""
    import pyspark

    h = hashlib.sha256(f"spark={pyspark.__version__}\n".encode())
    for p in _source_files():
        h.update(str(p.relative_to(SOURCES)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    root = os.environ.get("TFLUX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tflux"
    )
    return Path(root) / "spark"


def build_jar(force: bool = False) -> str:
    """The jar's path, compiling it first when the cache has none for these sources.

    Raises :class:`JarBuildError` without a JDK (``javac`` and ``jar``) or when javac fails.
    The jar is written beside its final name and renamed into place, so concurrent builders
    never see half a jar.
    """
    target = cache_dir() / f"tflux-spark-{cache_key()}.jar"
    if target.is_file() and not force:
        return str(target)
    javac, jar = _tool("javac"), _tool("jar")
    if javac is None or jar is None:
        raise JarBuildError(
            "tflux: no JDK found (javac and jar on PATH or in $JAVA_HOME/bin); "
            "the Python data sources serve instead"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        java = [str(p) for p in _source_files() if p.suffix == ".java"]
        cp = os.pathsep.join([str(_spark_home() / "jars" / "*")])
        cmd = [javac, "-nowarn", "--release", "17", "-encoding", "UTF-8", "-cp", cp]
        run = subprocess.run(
            [*cmd, "-d", str(classes), *java], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            raise JarBuildError(f"tflux: javac failed:\n{run.stderr[-4000:]}")
        services = SOURCES / "META-INF"
        shutil.copytree(services, classes / "META-INF")
        out = Path(tmp) / "tflux-spark.jar"
        run = subprocess.run(
            [jar, "cf", str(out), "-C", str(classes), "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise JarBuildError(f"tflux: jar failed:\n{run.stderr[-4000:]}")
        os.replace(out, target)
    return str(target)


def jar_path() -> str | None:
    """The built jar (building it on first call), or None where no JDK can build it."""
    try:
        return build_jar()
    except JarBuildError:
        return None


def jvm_reader_loaded(spark) -> bool:
    """Whether the session's driver can load the JVM reader (its jar is on the class path)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(PROVIDER, False, loader)
        return True
    except Exception:  # no JVM gateway (Spark Connect), or the class is absent
        return False
