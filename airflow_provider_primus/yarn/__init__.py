"""The YARN backend: executors are containers of a YARN application whose ApplicationMaster (ours,
in Java: ``java/``) the Python master drives over a token-guarded API (HTTPS on a TLS job).

``build`` builds that ApplicationMaster (and the mini cluster's launcher) with Maven into the cache;
``config`` reads a Hadoop configuration directory; ``rest`` and ``hdfs`` speak the ResourceManager's
REST API and WebHDFS, ``kerberos`` their SPNEGO on a Kerberized cluster; ``am`` is the client of the
ApplicationMaster's API and ``am_cert`` issues the AM's certificate in its container; ``application``
submits and finds a job's application; ``backend`` implements the executor contract on it.
"""
