"""The ceiling: pyarrow encoding the benchmark's rows to zstd Parquet, one thread, no Spark.

    python -m bench.support.encode ROWS FILES DAYS TARGET_FILE_BYTES OUT_DIR [JSON_DIR]

Makes the same rows as the JSON files (bench.support.dataset.make_rows, not timed), then times
``pyarrow.parquet.write_table`` of them in files of about the target size into OUT_DIR (tmpfs),
encoded as the sink's writer encodes them (zstd at the same level, the same dictionary columns,
decimals as integers: the same files, so the ratio measures getting rows to the encoder, not
encoder settings), and prints one JSON line: wall and CPU seconds of the encode, files and bytes.
Arrow's thread pools are set to one thread: this is the rate of one core.

With JSON_DIR it also times ``pyarrow.json.read_json`` of the benchmark's JSON files (explicit
schema, one thread): parsing the input, which the sink must do and the encode does not. Parse plus
encode is the rate of one core for the two steps the data plane cannot skip.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from bench.support.dataset import json_parse_options, make_rows
from spark_app.staging.writer import compression_options, dictionary_columns


def parse_cpu(directory: Path) -> float:
    """CPU seconds of parsing every JSON-lines file of ``directory`` with pyarrow (explicit schema, one thread)."""
    options = json_parse_options()
    started = time.process_time()
    for path in sorted(directory.glob("part-*.json")):
        pj.read_json(path, read_options=pj.ReadOptions(use_threads=False), parse_options=options)
    return time.process_time() - started


def main() -> int:
    rows, files, days, target = (int(v) for v in sys.argv[1:5])
    out = Path(sys.argv[5])
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    per_file = -(-rows // files)
    table = pa.concat_tables([make_rows(i * per_file, max(0, min(per_file, rows - i * per_file)), rows, days)
                              for i in range(files)]).combine_chunks()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    options = {**compression_options({"write.parquet.compression-codec": "zstd"}),
               "use_dictionary": dictionary_columns(table), "store_decimal_as_integer": True}
    probe = table.slice(0, min(100_000, table.num_rows))
    sink = pa.BufferOutputStream()
    pq.write_table(probe, sink, **options)
    rows_per_file = max(1, int(target / max(1.0, sink.getvalue().size / max(1, probe.num_rows))))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    written = size = 0
    for offset in range(0, table.num_rows, rows_per_file):
        path = out / f"encode-{written:05d}.parquet"
        pq.write_table(table.slice(offset, rows_per_file), path, **options)
        written += 1
        size += os.path.getsize(path)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    shutil.rmtree(out, ignore_errors=True)
    result = {"rows": table.num_rows, "wall_s": wall, "cpu_s": cpu, "files": written, "bytes": size}
    if len(sys.argv) > 6:
        result["parse_cpu_s"] = parse_cpu(Path(sys.argv[6]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
