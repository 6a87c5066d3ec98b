"""The bucket index: bucket function and file naming."""

from runner.index.bucket import HASH_FUNCTION, bucket_column
from runner.index.naming import DataFileName, data_file_name, new_file_id, parse_data_file_name

__all__ = [
    "HASH_FUNCTION",
    "DataFileName",
    "bucket_column",
    "data_file_name",
    "new_file_id",
    "parse_data_file_name",
]
