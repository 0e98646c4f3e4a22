"""tests/mount/s3server.py — the S3-compatible server of tests/mount/source_s3.sh
(start_s3): moto's standalone S3 server (moto_server's WSGI application, from the venv
of tests/requirements-servers.txt) with two things the cases need that `moto_server`
alone does not do:

  - signatures are verified (moto_server accepts any): one IAM user, whose access key id
    and secret are S3SRV_KEY_ID and S3SRV_SECRET of the environment, may do s3:*; any
    other key, a wrong secret or an unsigned request is refused (403);
  - objects outlive the process: at start every file STATE/BUCKET/KEY... is loaded as
    object KEY of BUCKET, Last-Modified its mtime (source_s3.sh's s3_put keeps such a copy
    of what it uploads), so a server killed and restarted on the same port serves the
    same objects with the same ETag and Last-Modified, as a store that was unreachable
    for a while would.

usage: python s3server.py PORT STATE (listens on 127.0.0.1:PORT once loaded; request
lines to stderr). Uses moto's internals (its backends): tests/requirements-servers.txt
pins the version it was written against.
"""
import datetime
import json
import os
import sys

from moto import settings
from moto.core import DEFAULT_ACCOUNT_ID
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

REGION = os.environ.get("AWS_REGION", "us-east-1")


def main():
    port, state = int(sys.argv[1]), sys.argv[2]
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    iam.create_user(REGION, "batchfs-test")
    key = iam.create_access_key("batchfs-test")
    key.access_key_id = os.environ["S3SRV_KEY_ID"]
    key.secret_access_key = os.environ["S3SRV_SECRET"]
    iam.put_user_policy("batchfs-test", "s3", json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))

    s3 = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for bucket in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        s3.create_bucket(bucket, REGION)
        top = os.path.join(state, bucket)
        for d, _, files in os.walk(top):
            for f in files:
                path = os.path.join(d, f)
                with open(path, "rb") as fh:
                    obj = s3.put_object(bucket, os.path.relpath(path, top), fh.read())
                mtime = datetime.datetime.fromtimestamp(os.stat(path).st_mtime,
                                                        datetime.timezone.utc)
                obj.last_modified = mtime.replace(tzinfo=None)

    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from now on every request is checked
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=True)
    print("s3server: serving on 127.0.0.1:%d" % port, file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
