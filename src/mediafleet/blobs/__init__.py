"""Content-addressed blobs: what every store shares (:mod:`.protocol`), a local folder
(:mod:`.local`), an S3-compatible bucket (:mod:`.s3`), and the retention rule (:mod:`.retention`)."""
