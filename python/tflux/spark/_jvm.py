"""The JVM reader's jar.

A wheel ships it: ``make wheels`` compiles the Java sources of this package (``jvm/``) against the
Spark its ``spark`` extra allows and writes ``tflux-spark.jar`` beside this module (gitignored;
``[tool.maturin] include`` puts it in the wheel), so a machine with a Java runtime and no JDK gets
the JVM reader. Its manifest names the sources it was compiled from (``Tflux-Sources``) and the
Spark version whose jars it was compiled against (``Spark-Version``): the jar calls Spark
internals (``execution.vectorized``, ``PythonDataSourceV2``) that carry no promise across minor
releases. :func:`choose_jar` serves the shipped jar only under a running Spark of the same
major.minor and from the same sources. The sources compile against every Spark the extra allows:
they use only what Spark 4.0 has (``WritableColumnVector.putByteArray(int, ByteBuffer, int,
int)``, for one, came after 4.0: they pass ``byte[]``), which ``make jar-floor`` checks by
compiling them against the lowest pyspark the extra allows (:func:`_spark_floor`).

Otherwise (a source checkout, another Spark minor) the jar is built with the JDK's ``javac`` and
``jar`` against the installed pyspark's jars, on first use, into a per-user cache keyed by the
sources' hash and the Spark version. No Maven, no download; without a JDK :func:`jar_path` is
``None`` and the Python sources serve.

Both are compiled with ``javac --release 17``: the jar only ever loads into a Spark 4 JVM (it
calls Spark 4's ``PythonDataSourceV2``, and the ``spark`` extra needs pyspark 4), which runs on
Java 17 or later only (its own jars are Java 17 class files), so a lower target buys nothing; and
the sources use Java 13's absolute ``ByteBuffer`` bulk reads, so ``--release 11`` fails. Nothing
here imports pyspark at module level; run as a script (``python python/tflux/spark/_jvm.py
--ship PYSPARK_DIR``) it needs nothing but the standard library and a JDK, so ``make wheels``
can build the jar before tflux is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SOURCES = Path(__file__).parent / "jvm"
# Written by `make wheels` (gitignored) and carried by the wheel; absent in a source checkout.
SHIPPED = Path(__file__).parent / "tflux-spark.jar"
# Loaded from the session's class path to tell whether the JVM reader serves "tflux".
PROVIDER = "io.tflux.spark.LogSource"
# javac --release: the Java that Spark 4 needs (the module docstring says why not lower).
JAVA_RELEASE = "17"


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


def running_spark_version() -> str:
    """The installed pyspark's version (the Spark a session of this interpreter runs)."""
    import pyspark

    return pyspark.__version__


def _minor(version: str) -> tuple[int, ...] | None:
    """``(major, minor)`` of a Spark version (``4.3.0``, ``4.1.0.dev1``); None if unreadable."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else None


def sources_digest() -> str:
    """sha256 of the Java sources (names and bytes): which sources a jar was compiled from."""
    h = hashlib.sha256()
    for p in _source_files():
        h.update(p.relative_to(SOURCES).as_posix().encode() + b"\0")  # same on every OS
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


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
    """sha256 of the Java sources (:func:`sources_digest`) and the pyspark version."""
    spark = running_spark_version()
    return hashlib.sha256(f"spark={spark}\n{sources_digest()}".encode()).hexdigest()[:16]


def cache_dir() -> Path:
    root = os.environ.get("TFLUX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tflux"
    )
    return Path(root) / "spark"


def _compile(target: Path, spark_home: Path, spark_version: str) -> None:
    """Compiles the Java sources against ``spark_home/jars`` into the jar ``target``, with a
    manifest naming the sources (:func:`sources_digest`) and ``spark_version``.

    Raises :class:`JarBuildError` without a JDK (``javac`` and ``jar``) or when javac fails.
    The jar is written beside ``target`` and renamed into place, so concurrent builders never
    see half a jar.
    """
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
        cp = os.pathsep.join([str(spark_home / "jars" / "*")])
        cmd = [javac, "-nowarn", "--release", JAVA_RELEASE, "-encoding", "UTF-8", "-cp", cp]
        run = subprocess.run(
            [*cmd, "-d", str(classes), *java], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            raise JarBuildError(f"tflux: javac failed:\n{run.stderr[-4000:]}")
        services = SOURCES / "META-INF"
        shutil.copytree(services, classes / "META-INF")
        manifest = Path(tmp) / "MANIFEST.MF"
        manifest.write_text(
            "Implementation-Title: tflux-spark\n"
            f"Tflux-Sources: {sources_digest()}\n"
            f"Spark-Version: {spark_version}\n"
            f"Java-Release: {JAVA_RELEASE}\n"
        )
        out = Path(tmp) / "tflux-spark.jar"
        run = subprocess.run(
            [jar, "cfm", str(out), str(manifest), "-C", str(classes), "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise JarBuildError(f"tflux: jar failed:\n{run.stderr[-4000:]}")
        os.replace(out, target)


def build_jar(force: bool = False) -> str:
    """The cached jar's path, compiling it first against the installed pyspark when the cache
    has none for these sources and this Spark version (:func:`_compile` says what it raises)."""
    target = cache_dir() / f"tflux-spark-{cache_key()}.jar"
    if target.is_file() and not force:
        return str(target)
    _compile(target, _spark_home(), running_spark_version())
    return str(target)


def ship_jar(spark_home: Path, out: Path = SHIPPED) -> Path:
    """Compiles the jar a wheel carries (``make wheels``) against the pyspark package directory
    ``spark_home`` (its ``jars/`` and ``version.py``), not against the running environment's."""
    text = (spark_home / "version.py").read_text()
    found = re.search(r"__version__(?:\s*:\s*str)?\s*=\s*[\"']([^\"']+)[\"']", text)
    if found is None:
        raise JarBuildError(f"tflux: no __version__ in {spark_home / 'version.py'}")
    _compile(out, spark_home, found[1])
    return out


def read_manifest(jar: Path) -> dict[str, str]:
    """The main attributes of a jar's ``META-INF/MANIFEST.MF`` (continuation lines joined)."""
    with zipfile.ZipFile(jar) as z:
        text = z.read("META-INF/MANIFEST.MF").decode("utf-8")
    attrs: dict[str, str] = {}
    key = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            if attrs:
                break  # the main section ends at its first blank line
            continue
        if line.startswith(" ") and key is not None:
            attrs[key] += line[1:]
        elif ":" in line:
            key, _, value = line.partition(":")
            attrs[key] = value.strip()
    return attrs


def shipped_refusal(jar: Path, running: str) -> str | None:
    """Why the shipped ``jar`` cannot serve a Spark ``running``, or None when it can."""
    try:
        attrs = read_manifest(jar)
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        return f"the shipped jar {jar} cannot be read ({exc})"
    compiled = attrs.get("Spark-Version")
    if attrs.get("Tflux-Sources") != sources_digest():
        return (
            f"the shipped jar {jar} was compiled from other Java sources than those beside it "
            "(a source checkout whose sources changed since `make wheels`)"
        )
    if compiled is None or _minor(compiled) is None or _minor(compiled) != _minor(running):
        return (
            f"the shipped jar {jar} was compiled against Spark {compiled}, and this is Spark "
            f"{running}: the JVM reader uses Spark internals that change between minor releases"
        )
    return None


@dataclass(frozen=True)
class JarChoice:
    """Which jar serves ``spark.jars``: ``origin`` "shipped" (in the wheel), "built" (compiled
    into the cache) or "none" (the Python sources serve); ``reason`` says why."""

    path: str | None
    origin: Literal["shipped", "built", "none"]
    reason: str


def choose_jar() -> JarChoice:
    """The shipped jar when it fits the running Spark, else one built into the cache, else none."""
    running = running_spark_version()
    refusal = None
    if SHIPPED.is_file():
        refusal = shipped_refusal(SHIPPED, running)
        if refusal is None:
            return JarChoice(
                str(SHIPPED),
                "shipped",
                f"shipped with tflux, compiled for Spark {running}'s minor release",
            )
    why = refusal or "no jar shipped with tflux (a source checkout, or built from the sdist)"
    try:
        built = build_jar()
    except JarBuildError as exc:
        return JarChoice(None, "none", f"{why}; {exc}")
    return JarChoice(built, "built", f"{why}; built from the Java sources for Spark {running}")


def jar_path() -> str | None:
    """The jar :func:`choose_jar` picks, or None where the Python sources serve. A shipped jar
    passed over (another Spark minor, other sources) is reported as a ``RuntimeWarning``."""
    choice = choose_jar()
    if choice.origin != "shipped" and SHIPPED.is_file():
        warnings.warn(f"tflux: {choice.reason}", RuntimeWarning, stacklevel=3)
    return choice.path


def jvm_reader_loaded(spark) -> bool:
    """Whether the session's driver can load the JVM reader (its jar is on the class path).

    A yes is remembered on the session's ``SparkContext`` (a class once loadable stays so; the
    question costs a dozen py4j round trips, and replay asks it several times); a no is asked
    again."""
    try:
        sc = spark.sparkContext
        if getattr(sc, "_tflux_jvm_reader", False):
            return True
        jvm = sc._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(PROVIDER, False, loader)
        sc._tflux_jvm_reader = True
        return True
    except Exception:  # no JVM gateway (Spark Connect), or the class is absent
        return False


def _spark_requirement(pyproject: Path | None = None) -> str:
    """The pyspark requirement of the ``spark`` extra in ``pyproject`` (by default the
    checkout's pyproject.toml, beside the sources ``make wheels`` runs this file from): the
    Spark the shipped jar is compiled against, as ``make wheels`` installs the newest release
    it allows."""
    import tomllib

    if pyproject is None:
        pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["spark"]
    return next(r for r in extra if re.match(r"pyspark\b", r))


def _spark_floor(pyproject: Path | None = None) -> str:
    """The lowest pyspark the ``spark`` extra allows, pinned (``pyspark>=4.0,<5`` gives
    ``pyspark==4.0.0``): what ``make jar-floor`` compiles the Java sources against."""
    requirement = _spark_requirement(pyproject)
    found = re.search(r">=\s*(\d+(?:\.\d+)*)", requirement)
    if found is None:
        raise ValueError(f"tflux: the spark extra's {requirement!r} has no lower bound")
    parts = found[1].split(".")
    return "pyspark==" + ".".join(parts + ["0"] * (3 - len(parts)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--spark-requirement", action="store_true", help="print the pyspark pin")
    group.add_argument(
        "--spark-floor", action="store_true", help="print the lowest pyspark the pin allows"
    )
    group.add_argument("--ship", metavar="PYSPARK_DIR", type=Path, help="write the shipped jar")
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    if args.spark_requirement:
        print(_spark_requirement())
        return 0
    if args.spark_floor:
        print(_spark_floor())
        return 0
    try:
        out = ship_jar(args.ship, args.out)
    except JarBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    attrs = read_manifest(out)
    print(f"{out}: Spark-Version {attrs['Spark-Version']}, Java-Release {attrs['Java-Release']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
