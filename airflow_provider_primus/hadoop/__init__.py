"""Hadoop's client side, without a JVM: the client configuration directory (``config``), WebHDFS
(``webhdfs``: the staging client; ``filesystem``: ``hdfs://`` as a pyarrow filesystem for files
sources and checkpoints) and Kerberos/SPNEGO for both (``kerberos``).

It sits below every layer that talks to a Hadoop cluster, so reading ``hdfs://`` data (``data/``)
does not depend on the YARN backend (``yarn/``), and the test cluster (``embedded/yarn``) uses
what a real client uses. It imports nothing of the package.
"""
