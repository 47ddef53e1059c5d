"""The YARN backend: executors are containers of a YARN application whose ApplicationMaster (ours,
in Java: ``java/``) the Python master drives over a token-guarded local API.

``build`` builds that ApplicationMaster (and the mini cluster's launcher) with Maven into the cache;
``config`` reads a Hadoop configuration directory; ``rest`` and ``hdfs`` speak the ResourceManager's
REST API and WebHDFS; ``am`` is the client of the ApplicationMaster's API; ``application`` submits
and finds a job's application; ``backend`` implements the executor contract on it.
"""
