"""The sandbox, here or on a Jupyter server: what every face outside the server calls."""
