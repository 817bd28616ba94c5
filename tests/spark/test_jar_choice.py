"""Which jar ``tflux.spark.jar_path()`` hands to ``spark.jars`` (issue 46): the jar a wheel ships
when it was compiled from these sources for the running Spark's major.minor, else one built with
the JDK into the cache, else None (the Python sources serve), with the reason a shipped jar was
passed over. No Spark session is started here; ``.ci/wheels`` reads a base through the shipped jar
in a venv that has only a Java runtime.
"""

from __future__ import annotations

import os
import tomllib
import warnings
import zipfile
from pathlib import Path

import pytest
import tflux.spark
from tflux.spark import _jvm

REPO = Path(__file__).resolve().parents[2]


def write_jar(path: Path, **attrs: str) -> Path:
    """A jar whose manifest holds ``attrs`` (default: these sources, Spark 4.3.0), its lines
    wrapped at 72 bytes as ``jar`` wraps them."""
    attrs = {"Tflux-Sources": _jvm.sources_digest(), "Spark-Version": "4.3.0", **attrs}
    lines = ["Manifest-Version: 1.0"]
    for key, value in attrs.items():
        line = f"{key}: {value}"
        lines.append(line[:72])
        lines.extend(" " + line[i : i + 71] for i in range(72, len(line), 71))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "\r\n".join(lines) + "\r\n\r\n")
        z.writestr("io/tflux/spark/LogSource.class", b"\xca\xfe\xba\xbe")
    return path


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The shipped jar's place (empty), the running Spark (4.3.1) and a JDK that builds into
    ``tmp_path/cache`` (``world.jdk = False``: no JDK); ``world.builds`` counts builds."""

    class World:
        shipped = tmp_path / "pkg" / "tflux-spark.jar"
        built = tmp_path / "cache" / "tflux-spark-0123456789abcdef.jar"
        spark = "4.3.1"
        jdk = True
        builds = 0

    world = World()
    world.shipped.parent.mkdir()

    def build_jar(force=False):
        world.builds += 1
        if not world.jdk:
            raise _jvm.JarBuildError("tflux: no JDK found (javac and jar on PATH)")
        return str(world.built)

    monkeypatch.setattr(_jvm, "SHIPPED", world.shipped)
    monkeypatch.setattr(_jvm, "running_spark_version", lambda: world.spark)
    monkeypatch.setattr(_jvm, "build_jar", build_jar)
    return world


def test_a_shipped_jar_for_this_spark_minor_serves_without_a_build(world):
    write_jar(world.shipped, **{"Spark-Version": "4.3.0"})
    choice = _jvm.choose_jar()
    assert (choice.path, choice.origin) == (str(world.shipped), "shipped")
    assert world.builds == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tflux.spark.jar_path() == str(world.shipped)


def test_a_shipped_jar_serves_where_no_jdk_is(world):
    write_jar(world.shipped)
    world.jdk = False
    assert tflux.spark.jar_path() == str(world.shipped)


def test_without_a_shipped_jar_the_jar_is_built_into_the_cache(world):
    choice = _jvm.choose_jar()
    assert (choice.path, choice.origin) == (str(world.built), "built")
    assert "no jar shipped" in choice.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a source checkout is no surprise: no warning
        assert tflux.spark.jar_path() == str(world.built)


def test_without_a_shipped_jar_or_a_jdk_the_python_sources_serve(world):
    world.jdk = False
    choice = _jvm.choose_jar()
    assert (choice.path, choice.origin) == (None, "none")
    assert "no JDK" in choice.reason
    assert tflux.spark.jar_path() is None


@pytest.mark.parametrize("compiled", ["4.2.1", "4.4.0", "5.3.0", "not-a-version"])
def test_a_shipped_jar_for_another_spark_minor_is_passed_over_with_the_reason(world, compiled):
    write_jar(world.shipped, **{"Spark-Version": compiled})
    choice = _jvm.choose_jar()
    assert (choice.path, choice.origin) == (str(world.built), "built")
    assert f"compiled against Spark {compiled}" in choice.reason
    assert "this is Spark 4.3.1" in choice.reason
    with pytest.warns(RuntimeWarning, match=f"compiled against Spark {compiled}"):
        assert tflux.spark.jar_path() == str(world.built)


def test_a_mismatched_shipped_jar_without_a_jdk_says_both_reasons(world):
    write_jar(world.shipped, **{"Spark-Version": "4.2.1"})
    world.jdk = False
    choice = _jvm.choose_jar()
    assert (choice.path, choice.origin) == (None, "none")
    assert "compiled against Spark 4.2.1" in choice.reason and "no JDK" in choice.reason
    with pytest.warns(RuntimeWarning, match="no JDK"):
        assert tflux.spark.jar_path() is None


def test_a_shipped_jar_from_other_sources_is_passed_over(world):
    write_jar(world.shipped, **{"Tflux-Sources": "0" * 64})
    choice = _jvm.choose_jar()
    assert choice.origin == "built" and "other Java sources" in choice.reason


@pytest.mark.parametrize("content", [b"", b"not a zip", None])
def test_an_unreadable_shipped_jar_is_passed_over(world, content):
    if content is None:  # a zip without a manifest
        with zipfile.ZipFile(world.shipped, "w") as z:
            z.writestr("io/tflux/spark/LogSource.class", b"\xca\xfe\xba\xbe")
    else:
        world.shipped.write_bytes(content)
    choice = _jvm.choose_jar()
    assert choice.origin == "built" and "cannot be read" in choice.reason
    assert str(world.shipped) in choice.reason


def test_the_manifest_reader_joins_wrapped_lines(tmp_path):
    digest = _jvm.sources_digest()
    assert len(f"Tflux-Sources: {digest}") > 72  # the value is wrapped
    attrs = _jvm.read_manifest(write_jar(tmp_path / "x.jar"))
    assert attrs["Tflux-Sources"] == digest and attrs["Spark-Version"] == "4.3.0"


def test_the_wheel_carries_the_shipped_jar_and_git_never_does():
    """maturin leaves gitignored files out of a wheel: the jar is named in ``include`` for the
    wheel only (an sdist builds it from the sources, or falls back), at the path
    :data:`_jvm.SHIPPED` reads it from, and ignored so that a `make wheels` never commits it."""
    maturin = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["maturin"]
    # Where the installed package reads it from (site-packages in CI, the checkout in a dev
    # install), as a path inside the package.
    jar = _jvm.SHIPPED.relative_to(Path(tflux.__file__).parent).as_posix()
    assert maturin["python-source"] == "python"
    include = [i for i in maturin["include"] if isinstance(i, dict) and i["path"].endswith(jar)]
    assert include == [{"path": f"python/tflux/{jar}", "format": "wheel"}]
    assert f"/python/tflux/{jar}" in (REPO / ".gitignore").read_text().split()


def test_the_build_backend_pin_is_the_one_make_wheels_installs():
    """The jar lands at its package path in a wheel only from maturin 1.12.1 on (1.11.5 leaves
    it out, 1.12.0 writes it at ``python/tflux/...``): ``pip wheel .`` and ``pip install .``
    build with the ``[build-system]`` pin, ``make wheels`` with its own, and both are that floor."""
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    tools = next(
        line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("WHEEL_")
    )
    maturin = [r for r in backend if r.startswith("maturin")]
    assert maturin == ["maturin>=1.12.1,<2"]
    assert f"'{maturin[0]}'" in tools.split("=", 1)[1].split()


def test_the_shipped_jar_compiles_against_the_spark_extra():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = [r for r in extra["optional-dependencies"]["spark"] if r.startswith("pyspark")]
    assert [_jvm._spark_requirement(REPO / "pyproject.toml")] == pins


@pytest.mark.parametrize(
    ("pin", "floor"),
    [("pyspark>=4.0,<5", "pyspark==4.0.0"), ("pyspark >= 4.1.2, <5", "pyspark==4.1.2")],
)
def test_the_spark_floor_is_the_extras_lower_bound(tmp_path, pin, floor):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project.optional-dependencies]\nspark = ["{pin}", "pyarrow>=15"]\n')
    assert _jvm._spark_floor(pyproject) == floor


def test_the_java_sources_compile_against_the_lowest_spark_the_extra_allows(tmp_path):
    """``make jar-floor`` runs this with ``TFLUX_SPARK_FLOOR`` naming that pyspark's files (its
    sdist's jars in ``jars/`` and its ``version.py``; a 434 MB download, so not in CI): Spark
    4.0 lacks ``putByteArray(int, ByteBuffer, int, int)``, which the sources once called."""
    home = os.environ.get("TFLUX_SPARK_FLOOR")
    if not home:
        pytest.skip("TFLUX_SPARK_FLOOR is not set (make jar-floor sets it)")
    floor = _jvm._spark_floor(REPO / "pyproject.toml").removeprefix("pyspark==")
    out = _jvm.ship_jar(Path(home), tmp_path / "floor.jar")
    assert _jvm.read_manifest(out)["Spark-Version"] == floor


def test_ship_jar_writes_a_jar_that_choose_jar_serves(tmp_path):
    """The real build (``make wheels``' step) against the installed pyspark: its manifest names
    these sources and that Spark, and :func:`_jvm.shipped_refusal` accepts it."""
    import _needs

    pyspark = _needs.pyspark()
    if _jvm._tool("javac") is None or _jvm._tool("jar") is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    out = _jvm.ship_jar(Path(pyspark.__file__).parent, tmp_path / "tflux-spark.jar")
    attrs = _jvm.read_manifest(out)
    assert attrs["Spark-Version"] == pyspark.__version__
    assert attrs["Tflux-Sources"] == _jvm.sources_digest()
    assert attrs["Java-Release"] == _jvm.JAVA_RELEASE == "17"
    assert _jvm.shipped_refusal(out, pyspark.__version__) is None
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
    assert {
        "io/tflux/spark/LogSource.class",
        "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister",
    } <= names
