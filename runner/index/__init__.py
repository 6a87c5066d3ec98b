"""The bucket index: the bucket function (bucket.py in Spark, string_hash.py in Python), the
table's bucket layout (layout.py) and file naming (naming.py). Import the modules: this
package imports nothing, so a reader without Spark (runner read --key) never loads pyspark."""
