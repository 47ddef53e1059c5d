"""The YARN backend: executors are containers of a YARN application whose ApplicationMaster (ours,
in Java: ``java/``) the Python master drives over a token-guarded API (HTTPS on a TLS job).

``build`` builds that ApplicationMaster with Maven into the cache; ``rest`` speaks the
ResourceManager's REST API; the Hadoop client pieces it shares with ``data/`` (the configuration
directory, WebHDFS, Kerberos) are in ``hadoop/``; ``am`` is the client of the
ApplicationMaster's API and ``am_cert`` issues the AM's certificate in its container; ``application``
submits and finds a job's application; ``backend`` implements the executor contract on it.
"""
