package dev.primus.yarn;

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * Hadoop's own mini cluster on loopback, for the test suite and `primus yarn up`: a
 * ResourceManager, NodeManagers and (optionally) an HDFS NameNode + DataNode in this one JVM.
 *
 * <p>Once everything is up it writes the configuration clients need into {@code --conf-dir}
 * (core-site.xml, hdfs-site.xml, yarn-site.xml: the addresses the cluster chose, which are random
 * ports) and then {@code cluster.json} (the same facts for Python), renamed into place last so a
 * reader that sees it sees a started cluster. It runs until SIGTERM or, attached
 * ({@code --watch-stdin true}), until its stdin closes (its owner died). With {@code --kerberos true}
 * the cluster is Kerberized ({@link Kerberos}: its KDC, keytabs and client krb5.conf in the state
 * directory, named in cluster.json). A failed start exits the JVM: the mini cluster leaves non-daemon threads behind.
 */
public final class MiniCluster {
  private MiniCluster() {}

  public static void main(String[] argv) {
    try {
      run(Args.parse(argv));
    } catch (Throwable t) {
      t.printStackTrace();
      System.err.flush();
      Runtime.getRuntime().halt(1);
    }
  }

  private static void run(Args a) throws Exception {
    File state = new File(a.get("--state-dir", null)).getAbsoluteFile();
    File confDir = new File(a.get("--conf-dir", new File(state, "conf").getPath())).getAbsoluteFile();
    int nodeManagers = Integer.parseInt(a.get("--node-managers", "1"));
    int nmMemory = Integer.parseInt(a.get("--nm-memory-mb", "4096"));
    int nmVcores = Integer.parseInt(a.get("--nm-vcores", "4"));
    boolean hdfs = Boolean.parseBoolean(a.get("--hdfs", "true"));
    String classpath = a.get("--application-classpath", System.getProperty("java.class.path"));
    boolean watchStdin = Boolean.parseBoolean(a.get("--watch-stdin", "true"));
    boolean kerberos = Boolean.parseBoolean(a.get("--kerberos", "false"));
    String clientUser = a.get("--kerberos-user", System.getProperty("user.name"));
    Files.createDirectories(confDir.toPath());

    Configuration conf = new YarnConfiguration();
    conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
    conf.set("yarn.nodemanager.hostname", "127.0.0.1");
    conf.setInt("yarn.nodemanager.resource.memory-mb", nmMemory);
    conf.setInt("yarn.nodemanager.resource.cpu-vcores", nmVcores);
    conf.setInt("yarn.scheduler.minimum-allocation-mb", 128);
    conf.setInt("yarn.scheduler.maximum-allocation-mb", nmMemory);
    conf.setInt("yarn.scheduler.maximum-allocation-vcores", nmVcores);
    conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
    conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
    conf.setFloat(
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", 99.0f);
    // CapacityScheduler queues inline (no capacity-scheduler.xml on this classpath); vcores count.
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.5");
    conf.set(
        "yarn.scheduler.capacity.resource-calculator",
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator");
    conf.setInt("yarn.resourcemanager.am.max-attempts", 4);
    conf.setInt("yarn.nodemanager.delete.debug-delay-sec", 0);
    conf.setLong("yarn.nodemanager.sleep-delay-before-sigkill.ms", 2000);
    // What an application's containers need on their classpath: this configuration and these jars.
    conf.set(
        YarnConfiguration.YARN_APPLICATION_CLASSPATH, confDir.getPath() + "," + classpath.replace(File.pathSeparatorChar, ','));

    Kerberos krb = kerberos ? Kerberos.start(state, clientUser) : null;
    if (krb != null) {
      krb.secure(conf);
    }

    MiniDFSCluster dfs = null;
    if (hdfs) {
      conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(state, "dfs").getPath());
      conf.set("dfs.namenode.http-address", "127.0.0.1:0");
      conf.set("dfs.datanode.address", "127.0.0.1:0");
      conf.set("dfs.datanode.http.address", "127.0.0.1:0");
      conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
      conf.setBoolean("dfs.permissions.enabled", true);
      conf.setBoolean("dfs.webhdfs.enabled", true);
      conf.setInt("dfs.replication", 1);
      dfs = new MiniDFSCluster.Builder(conf, new File(state, "dfs")).numDataNodes(1).build();
      dfs.waitActive();
      conf.set("fs.defaultFS", dfs.getURI().toString());
      conf.set("dfs.namenode.http-address", "127.0.0.1:" + dfs.getNameNode().getHttpAddress().getPort());
      if (krb != null) { // the client's home, as a cluster's admins create it (the superuser: us)
        FileSystem fs = dfs.getFileSystem();
        Path home = new Path("/user/" + clientUser);
        fs.mkdirs(home);
        fs.setOwner(home, clientUser, null);
      }
    }

    MiniYARNCluster yarn = new MiniYARNCluster("primus", nodeManagers, 1, 1);
    yarn.init(conf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(120_000)) {
      throw new IllegalStateException("NodeManagers did not register in 120 s");
    }
    final MiniDFSCluster dfsCluster = dfs;
    CountDownLatch stop = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stop.countDown();
                  try {
                    yarn.stop();
                  } catch (Throwable ignored) {
                    // stopping anyway
                  }
                  if (krb != null) {
                    try {
                      krb.stop();
                    } catch (Throwable ignored) {
                      // stopping anyway
                    }
                  }
                  if (dfsCluster != null) {
                    try {
                      dfsCluster.shutdown();
                    } catch (Throwable ignored) {
                      // stopping anyway
                    }
                  }
                }));

    Configuration live = yarn.getConfig();
    writeXml(live, new File(confDir, "yarn-site.xml"));
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", live.get("fs.defaultFS", "file:///"));
    core.set("hadoop.security.authentication", krb != null ? "kerberos" : "simple");
    writeXml(core, new File(confDir, "core-site.xml"));
    Configuration hdfsSite = new Configuration(false);
    if (dfs != null) {
      hdfsSite.set("dfs.namenode.http-address", conf.get("dfs.namenode.http-address"));
      hdfsSite.set("dfs.replication", "1");
      if (krb != null) {
        hdfsSite.set("dfs.namenode.kerberos.principal", krb.service);
        hdfsSite.set("dfs.web.authentication.kerberos.principal", "*");
      }
    }
    writeXml(hdfsSite, new File(confDir, "hdfs-site.xml"));

    List<Object> nodes = new ArrayList<>();
    for (int n = 0; n < nodeManagers; n++) {
      org.apache.hadoop.yarn.server.nodemanager.Context nm = yarn.getNodeManager(n).getNMContext();
      nodes.add(
          Json.map(
              "id", nm.getNodeId().toString(),
              "http", nm.getNodeId().getHost() + ":" + nm.getHttpPort()));
    }
    Map<String, Object> facts =
        Json.map(
            "pid", ProcessHandle.current().pid(),
            "conf_dir", confDir.getPath(),
            "resource_manager", live.get("yarn.resourcemanager.address"),
            "scheduler", live.get("yarn.resourcemanager.scheduler.address"),
            "rm_http", live.get("yarn.resourcemanager.webapp.address"),
            "node_managers", nodes,
            "fs_default", live.get("fs.defaultFS"),
            "webhdfs", dfs == null ? null : conf.get("dfs.namenode.http-address"),
            "nm_memory_mb", nmMemory,
            "nm_vcores", nmVcores,
            "kerberos", krb == null ? null : krb.facts());
    File out = new File(state, "cluster.json");
    File tmp = new File(state, "cluster.json.tmp");
    Files.write(tmp.toPath(), Json.write(facts).getBytes(StandardCharsets.UTF_8));
    Files.move(tmp.toPath(), out.toPath(), StandardCopyOption.ATOMIC_MOVE);
    System.out.println("PRIMUS-YARN-READY " + out);
    System.out.flush();

    // Stop when the owner closes our stdin (it died or asked), or on SIGTERM (the hook).
    Thread stdin =
        new Thread(
            () -> {
              try {
                while (System.in.read() >= 0) {
                  // ignore input
                }
              } catch (Exception ignored) {
                // closed
              }
              stop.countDown();
            });
    stdin.setDaemon(true);
    if (watchStdin) {
      stdin.start();
    }
    stop.await();
    System.exit(0);
  }

  private static void writeXml(Configuration c, File f) throws Exception {
    File tmp = new File(f.getPath() + ".tmp");
    try (OutputStream o = new FileOutputStream(tmp)) {
      c.writeXml(o);
    }
    Files.move(tmp.toPath(), f.toPath(), StandardCopyOption.ATOMIC_MOVE);
  }
}
