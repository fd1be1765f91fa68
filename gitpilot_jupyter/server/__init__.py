"""The jupyter_server extension: the sandbox REST API (see ``rest-api.yml``)."""
