"""Where a run's bytes are kept, shared by every feature that stores or reads them.

archive.py: the archive store (a local directory or an fsspec URL such as S3); keys.py: the one layout of keys
in it (`runs/<id>/upload.bin`, `runs/<id>/scalars.jsonl`); disk.py: a full disk (507) and the `.part` files
uploads are received into. Nothing here knows a feature: features import storage, never the other way round.
"""
