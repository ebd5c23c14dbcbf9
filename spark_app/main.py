"""Entry point of the SparkApplication: `spark-submit spark_app/main.py run SPEC --sink-version N --master ''`."""

import sys

from spark_app.cli import main

if __name__ == "__main__":
    sys.exit(main())
