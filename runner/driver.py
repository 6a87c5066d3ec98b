"""The SparkApplication's main file (`local:///opt/runner/driver.py` in the image).

spark-submit runs it in the driver pod with the mounted spec's path. It is `runner run SPEC`:
the same code path as a local run, where the session takes master and conf from Spark.
"""

import sys

from runner.cli import main

if __name__ == "__main__":
    sys.argv = ["runner", "run", *sys.argv[1:]]
    main()
