"""Settings for `bench/api.py`'s gunicorn: the real settings plus one trivial DRF endpoint (the baseline).

`/bench/ping/` is an APIView with no authentication, no throttling and no database access: what Django +
DRF cost by themselves on this machine, so the API's figures can be read as ratios against it.
"""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "bench.api_urls"
