"""Replay's small tables: the driver's rows as DataFrames, and their schemas."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

SEGMENT_BASE = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("segment", StringType()),
        StructField("seg_base", LongType()),
    ]
)
INCARNATIONS = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("inc_start", LongType()),
        StructField("inc_end", LongType()),
        StructField("adds_before", LongType()),
        StructField("base_id", LongType()),
    ]
)
SUMMARY = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("implementation", IntegerType()),
        StructField("last_id", LongType()),
    ]
)


# Up to this many rows, the driver's small tables are inline SQL tables (LocalRelation): Spark
# broadcasts them without running a job. Larger ones go to the JVM as Arrow (one job each).
INLINE_ROWS = 2000


def _sql_value(value, type_) -> str:
    if value is None:
        return f"CAST(NULL AS {type_.simpleString()})"
    if isinstance(type_, StringType):  # any text, no escaping rules: its UTF-8 bytes in hex
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    return f"CAST({int(value)} AS {type_.simpleString()})"


def _small(spark: SparkSession, rows: list[tuple], schema: StructType) -> DataFrame:
    """A DataFrame of the driver's ``rows``: an inline table when small (no job runs to
    broadcast it), else sent to the JVM as Arrow (no Python worker runs for it either, unlike
    ``createDataFrame`` of a list)."""
    if 0 < len(rows) <= INLINE_ROWS:
        types = [f.dataType for f in schema.fields]
        values = ",".join(
            "(" + ",".join(_sql_value(v, t) for v, t in zip(row, types, strict=True)) + ")"
            for row in rows
        )
        names = ",".join(f"`{f.name}`" for f in schema.fields)
        return spark.sql(f"SELECT * FROM VALUES {values} AS t({names})")
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(arrow)
    table = pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(columns, arrow, strict=True)], schema=arrow
    )
    return spark.createDataFrame(table, schema)


def _broadcast_allowed(spark: SparkSession) -> bool:
    """Whether the session allows broadcast joins (``autoBroadcastJoinThreshold`` not -1)."""
    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10485760")
    return str(threshold).strip() != "-1"


def logs_schema(spark: SparkSession) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from tflux.spark._columns import QUEUE_ADDS, log_schema

    full = from_arrow_schema(log_schema().append(QUEUE_ADDS))
    keep = ["source", "segment", "queue", "lsn", "kind", "key", "record_id", "message"]
    keep += ["implementation", "queue_adds"]
    return StructType([StructField("log_dir", StringType())] + [full[name] for name in keep])
