package dev.primus.yarn;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.RegisterApplicationMasterResponse;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.ContainerUpdateType;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.URL;
import org.apache.hadoop.yarn.api.records.UpdateContainerRequest;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.NMClient;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;

/**
 * The Primus ApplicationMaster: speaks YARN's AM protocol through Hadoop's own clients
 * (AMRMClientAsync to the ResourceManager, NMClientAsync to the NodeManagers) and is driven by the
 * Python master over a small HTTP/JSON API on its host, every call carrying the job token.
 *
 * <p>It holds no policy: the master decides which executors run with what resources; the AM asks
 * for containers (one ask per executor incarnation, tied to it by its allocation request id, so
 * roles of different sizes never swap containers), launches the executor command with the job's
 * documents and token as LocalResources, releases, resizes in place (container update requests,
 * increase and decrease), and reports how containers ended. A new attempt (work-preserving AM
 * restart: the application keeps containers across attempts) lists the previous attempt's
 * containers; the master re-adopts them by container id, and releases what nobody claims.
 *
 * <p>API (all under /v1, Authorization: Bearer token): GET status; PUT executors/KEY (launch,
 * idempotent, long-polls up to wait_s for the container to start); DELETE executors/KEY; POST
 * executors/KEY/resize; POST executors/KEY/adopt; POST release-unclaimed; POST finish.
 */
public final class ApplicationMaster {
  private final Configuration conf = new YarnConfiguration();
  private final Object lock = new Object();
  private final Map<String, Slot> slots = new LinkedHashMap<>();
  private final Map<Long, Slot> byRequest = new HashMap<>();
  private final Map<ContainerId, Slot> byContainer = new HashMap<>();
  // Containers of earlier attempts not (yet) adopted; and how those that ended meanwhile ended.
  private final Map<ContainerId, Container> previous = new LinkedHashMap<>();
  private final Map<ContainerId, ContainerStatus> previousEnded = new HashMap<>();
  private final ExecutorService updates = Executors.newFixedThreadPool(2);
  private final String token;
  private final long idleTimeoutMs;
  private final long updateTimeoutMs;
  private final ApplicationAttemptId attempt;
  private volatile long lastCall = System.currentTimeMillis();
  private long nextRequestId = 1;
  private Resource maxCapability;
  private AMRMClientAsync<ContainerRequest> rm;
  private NMClientAsync nm;
  private NMClient nmSync;
  private ByteBuffer containerTokens;
  private HttpServer http;
  private volatile boolean finishing;

  private ApplicationMaster(Args a) throws IOException {
    this.token = new String(Files.readAllBytes(Paths.get(a.get("--token-file", null))), StandardCharsets.UTF_8).trim();
    this.idleTimeoutMs = (long) (Double.parseDouble(a.get("--idle-timeout-s", "600")) * 1000);
    this.updateTimeoutMs = (long) (Double.parseDouble(a.get("--update-timeout-s", "20")) * 1000);
    String cid = System.getenv(ApplicationConstants.Environment.CONTAINER_ID.name());
    this.attempt = ContainerId.fromString(cid).getApplicationAttemptId();
  }

  public static void main(String[] argv) {
    try {
      krb5ConfFromEnvironment();
      Args a = Args.parse(argv);
      new ApplicationMaster(a).run(a);
    } catch (Throwable t) {
      log("fatal: " + t);
      t.printStackTrace();
      System.err.flush();
      Runtime.getRuntime().halt(1);
    }
  }

  /**
   * A node may name its Kerberos configuration in {@code KRB5_CONFIG} (MIT's variable, which a JVM
   * does not read) rather than keep it in /etc/krb5.conf: the JVM is pointed at it before Hadoop's
   * security initializes. A path that does not exist on this node is ignored.
   */
  static void krb5ConfFromEnvironment() {
    String path = System.getenv("KRB5_CONFIG");
    if (System.getProperty("java.security.krb5.conf") == null
        && path != null
        && Files.isRegularFile(Paths.get(path))) {
      System.setProperty("java.security.krb5.conf", path);
    }
  }

  static void log(String msg) {
    System.err.println(Instant.now() + " primus-am " + msg);
    System.err.flush();
  }

  private void run(Args a) throws Exception {
    containerTokens = containerTokens();
    String host = a.get("--bind-host", System.getenv(ApplicationConstants.Environment.NM_HOST.name()));
    InetSocketAddress bind = new InetSocketAddress(host, 0);
    String tlsCert = a.optional("--tls-cert");
    if (tlsCert != null) { // a TLS job: the master verifies this server against the job's CA
      HttpsServer https = HttpsServer.create(bind, 64);
      https.setHttpsConfigurator(
          new HttpsConfigurator(Tls.serverContext(Paths.get(tlsCert), Paths.get(a.get("--tls-key", null)))));
      http = https;
    } else {
      http = HttpServer.create(bind, 64);
    }
    http.createContext("/v1/", this::handle);
    http.setExecutor(Executors.newFixedThreadPool(32));
    http.start();
    int port = http.getAddress().getPort();

    nmSync = NMClient.createNMClient();
    nmSync.init(conf);
    nmSync.cleanupRunningContainersOnStop(false);
    nmSync.start();
    nm = NMClientAsync.createNMClientAsync(new NmCallbacks());
    nm.init(conf);
    nm.start();
    rm = AMRMClientAsync.createAMRMClientAsync(1000, new RmCallbacks());
    rm.init(conf);
    rm.start();
    RegisterApplicationMasterResponse reg = rm.registerApplicationMaster(host, port, "");
    synchronized (lock) {
      maxCapability = reg.getMaximumResourceCapability();
      for (Container c : reg.getContainersFromPreviousAttempts()) {
        previous.put(c.getId(), c);
      }
    }
    log("registered " + attempt + " at " + host + ":" + port + "; " + previous.size()
        + " containers from previous attempts");

    while (!finishing) {
      Thread.sleep(1000);
      if (System.currentTimeMillis() - lastCall > idleTimeoutMs) {
        log("no call from the master for " + idleTimeoutMs / 1000 + " s: finishing");
        finish(FinalApplicationStatus.FAILED,
            "no call from the Primus master for " + idleTimeoutMs / 1000 + " s");
      }
      expireUpdates();
    }
  }

  /** The AM's own delegation tokens (HDFS on a secure cluster) for its containers, less the AMRM token. */
  private static ByteBuffer containerTokens() throws IOException {
    Credentials creds = new Credentials(UserGroupInformation.getCurrentUser().getCredentials());
    Iterator<Token<?>> it = creds.getAllTokens().iterator();
    while (it.hasNext()) {
      if (it.next().getKind().equals(AMRMTokenIdentifier.KIND_NAME)) {
        it.remove();
      }
    }
    DataOutputBuffer dob = new DataOutputBuffer();
    creds.writeTokenStorageToStream(dob);
    return ByteBuffer.wrap(dob.getData(), 0, dob.getLength());
  }

  // --- the ResourceManager's side ---------------------------------------------------------------

  private final class RmCallbacks extends AMRMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainersAllocated(List<Container> containers) {
      for (Container c : containers) {
        Slot slot;
        synchronized (lock) {
          slot = byRequest.get(c.getAllocationRequestId());
          if (slot == null || !slot.state.equals("requested")) {
            slot = null;
          } else {
            rm.removeContainerRequest(slot.request);
            slot.container = c;
            slot.state = "allocated";
            slot.allocatedAt = System.currentTimeMillis();
            byContainer.put(c.getId(), slot);
            lock.notifyAll();
          }
        }
        if (slot == null) {
          log("releasing surplus container " + c.getId());
          rm.releaseAssignedContainer(c.getId());
          continue;
        }
        try {
          nm.startContainerAsync(c, launchContext(slot));
        } catch (Exception e) {
          startFailed(c.getId(), e);
        }
      }
    }

    @Override
    public void onContainersCompleted(List<ContainerStatus> statuses) {
      synchronized (lock) {
        for (ContainerStatus s : statuses) {
          Slot slot = byContainer.get(s.getContainerId());
          if (slot == null) {
            if (previous.remove(s.getContainerId()) != null) {
              previousEnded.put(s.getContainerId(), s);
            }
            continue;
          }
          slot.exitStatus = s.getExitStatus();
          slot.diagnostics = s.getDiagnostics();
          slot.state = slot.state.equals("releasing") ? "released" : "completed";
          log(slot.key + " " + s.getContainerId() + " ended: " + slot.state + " exit " + slot.exitStatus);
        }
        lock.notifyAll();
      }
    }

    @Override
    public void onContainersUpdated(List<UpdatedContainer> updated) {
      for (UpdatedContainer u : updated) {
        Container c = u.getContainer();
        synchronized (lock) {
          Slot slot = byContainer.get(c.getId());
          if (slot != null) {
            slot.container = c;
          }
        }
        // The NodeManager applies the new size when told with the new container token; on a decrease
        // the RM tells it too, so ours may be refused as already applied.
        updates.submit(() -> applyUpdate(c, u.getUpdateType()));
      }
    }

    @Override
    public void onContainersReceivedFromPreviousAttempts(List<Container> containers) {
      synchronized (lock) {
        for (Container c : containers) {
          if (!byContainer.containsKey(c.getId())) {
            previous.put(c.getId(), c);
          }
        }
        lock.notifyAll();
      }
    }

    @Override
    public void onShutdownRequest() {
      log("the ResourceManager asked this attempt to shut down");
      Runtime.getRuntime().halt(1);
    }

    @Override
    public void onNodesUpdated(List<NodeReport> reports) {}

    @Override
    public float getProgress() {
      return 0.5f;
    }

    @Override
    public void onError(Throwable e) {
      log("ResourceManager client error: " + e);
      Runtime.getRuntime().halt(1);
    }
  }

  private void applyUpdate(Container c, ContainerUpdateType type) {
    String error = null;
    try {
      nmSync.updateContainerResource(c);
    } catch (Exception e) {
      String msg = String.valueOf(e.getMessage());
      // The RM told the NodeManager first (a decrease): the update is in place already.
      if (!msg.contains("update version")) {
        error = type + " not applied by the NodeManager: " + msg;
      }
    }
    synchronized (lock) {
      Slot slot = byContainer.get(c.getId());
      if (slot != null && slot.resizeState.equals("pending")) {
        if (error == null && fits(slot.resizeTarget, c.getResource())) {
          slot.resizeState = "applied";
          slot.resizeAppliedAt = System.currentTimeMillis();
        } else if (error != null) {
          slot.resizeState = "refused";
          slot.resizeError = error;
        }
        lock.notifyAll();
      }
    }
    log("container " + c.getId() + " " + type + " -> " + c.getResource() + (error == null ? "" : " (" + error + ")"));
  }

  private static boolean fits(Resource target, Resource now) {
    return target != null
        && target.getMemorySize() == now.getMemorySize()
        && target.getVirtualCores() == now.getVirtualCores();
  }

  private void expireUpdates() {
    long now = System.currentTimeMillis();
    synchronized (lock) {
      for (Slot s : slots.values()) {
        if (s.resizeState.equals("pending") && now - s.resizeAskedAt > updateTimeoutMs) {
          s.resizeState = "refused";
          s.resizeError = "the ResourceManager granted no update in " + updateTimeoutMs / 1000
              + " s (no room on the node, or above the queue's limits)";
          lock.notifyAll();
        }
      }
    }
  }

  // --- the NodeManagers' side -------------------------------------------------------------------

  private ContainerLaunchContext launchContext(Slot slot) throws Exception {
    Map<String, LocalResource> local = new HashMap<>();
    for (Map<String, Object> r : slot.resources) {
      local.put(
          (String) r.get("link"),
          LocalResource.newInstance(
              URL.fromURI(new URI((String) r.get("url"))),
              LocalResourceType.FILE,
              LocalResourceVisibility.APPLICATION,
              ((Number) r.get("size")).longValue(),
              ((Number) r.get("timestamp")).longValue()));
    }
    StringBuilder cmd = new StringBuilder("exec");
    for (String arg : slot.command) {
      cmd.append(' ').append(shellQuote(arg));
    }
    String logs = ApplicationConstants.LOG_DIR_EXPANSION_VAR;
    cmd.append(" 1>").append(logs).append("/stdout 2>").append(logs).append("/stderr");
    return ContainerLaunchContext.newInstance(
        local, new HashMap<>(slot.env), Collections.singletonList(cmd.toString()), null,
        containerTokens.duplicate(), null);
  }

  static String shellQuote(String s) {
    return "'" + s.replace("'", "'\\''") + "'";
  }

  private void startFailed(ContainerId id, Throwable t) {
    synchronized (lock) {
      Slot slot = byContainer.get(id);
      if (slot != null) {
        slot.state = "failed";
        slot.diagnostics = "could not start: " + t;
        lock.notifyAll();
      }
    }
    rm.releaseAssignedContainer(id);
  }

  private final class NmCallbacks extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> data) {
      synchronized (lock) {
        Slot slot = byContainer.get(id);
        if (slot != null && slot.state.equals("allocated")) {
          slot.state = "running";
          slot.startedAt = System.currentTimeMillis();
        }
        lock.notifyAll();
      }
    }

    @Override
    public void onStartContainerError(ContainerId id, Throwable t) {
      startFailed(id, t);
    }

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {}

    @Override
    public void onContainerStopped(ContainerId id) {}

    @Override
    public void onContainerResourceIncreased(ContainerId id, Resource r) {}

    @Override
    public void onContainerResourceUpdated(ContainerId id, Resource r) {}

    @Override
    public void onGetContainerStatusError(ContainerId id, Throwable t) {}

    @Override
    public void onIncreaseContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onUpdateContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onStopContainerError(ContainerId id, Throwable t) {}
  }

  // --- the API the master drives ----------------------------------------------------------------

  private void handle(HttpExchange ex) throws IOException {
    int code = 200;
    Object body;
    try {
      String auth = ex.getRequestHeaders().getFirst("Authorization");
      byte[] given = auth == null ? new byte[0] : auth.getBytes(StandardCharsets.UTF_8);
      byte[] wanted = ("Bearer " + token).getBytes(StandardCharsets.UTF_8);
      if (!MessageDigest.isEqual(given, wanted)) {
        respond(ex, 401, Json.map("error", "missing or wrong job token"));
        return;
      }
      lastCall = System.currentTimeMillis();
      String path = ex.getRequestURI().getPath().substring("/v1/".length());
      Map<String, Object> in;
      try (InputStream is = ex.getRequestBody()) {
        in = Json.object(new String(is.readAllBytes(), StandardCharsets.UTF_8));
      }
      body = route(ex.getRequestMethod(), path, in);
      if (body instanceof Error) {
        code = ((Error) body).code;
        body = Json.map("error", ((Error) body).message);
      }
    } catch (IllegalArgumentException e) {
      code = 400;
      body = Json.map("error", e.getMessage());
    } catch (Exception e) {
      code = 500;
      body = Json.map("error", e.toString());
    }
    respond(ex, code, body);
  }

  private static final class Error {
    final int code;
    final String message;

    Error(int code, String message) {
      this.code = code;
      this.message = message;
    }
  }

  private Object route(String method, String path, Map<String, Object> in) throws Exception {
    String[] parts = path.split("/");
    if (path.equals("status") && method.equals("GET")) {
      return status();
    }
    if (path.equals("finish") && method.equals("POST")) {
      String status = String.valueOf(in.getOrDefault("status", "SUCCEEDED"));
      String message = String.valueOf(in.getOrDefault("message", ""));
      Thread t = new Thread(() -> finish(FinalApplicationStatus.valueOf(status), message));
      t.start();
      return Json.map("finishing", true);
    }
    if (path.equals("release-unclaimed") && method.equals("POST")) {
      return releaseUnclaimed();
    }
    if (parts.length >= 2 && parts[0].equals("executors")) {
      String key = URLDecoder.decode(parts[1], StandardCharsets.UTF_8);
      if (parts.length == 2 && method.equals("PUT")) {
        return launch(key, in);
      }
      if (parts.length == 2 && method.equals("GET")) {
        synchronized (lock) {
          Slot s = slots.get(key);
          return s == null ? new Error(404, "no executor " + key) : s.toJson();
        }
      }
      if (parts.length == 2 && method.equals("DELETE")) {
        return release(key);
      }
      if (parts.length == 3 && parts[2].equals("resize") && method.equals("POST")) {
        return resize(key, in);
      }
      if (parts.length == 3 && parts[2].equals("adopt") && method.equals("POST")) {
        return adopt(key, in);
      }
    }
    return new Error(404, "no route " + method + " /v1/" + path);
  }

  private Map<String, Object> status() {
    synchronized (lock) {
      List<Object> all = new ArrayList<>();
      for (Slot s : slots.values()) {
        all.add(s.toJson());
      }
      List<Object> unclaimed = new ArrayList<>();
      for (ContainerId id : previous.keySet()) {
        unclaimed.add(id.toString());
      }
      return Json.map(
          "attempt", attempt.toString(),
          "application", attempt.getApplicationId().toString(),
          "pid", ProcessHandle.current().pid(),
          "max_memory_mb", maxCapability == null ? null : maxCapability.getMemorySize(),
          "max_vcores", maxCapability == null ? null : maxCapability.getVirtualCores(),
          "executors", all,
          "unclaimed", unclaimed);
    }
  }

  @SuppressWarnings("unchecked")
  private Object launch(String key, Map<String, Object> in) throws InterruptedException {
    long waitMs = (long) (num(in, "wait_s", 0) * 1000);
    Slot slot;
    synchronized (lock) {
      slot = slots.get(key);
      if (slot == null) {
        int memory = (int) num(in, "memory_mb", -1);
        int vcores = (int) num(in, "vcores", -1);
        if (memory <= 0 || vcores <= 0) {
          return new Error(400, "memory_mb and vcores must be positive");
        }
        Map<String, String> env = new HashMap<>();
        for (Map.Entry<String, Object> e : ((Map<String, Object>) in.getOrDefault("env", Map.of())).entrySet()) {
          env.put(e.getKey(), String.valueOf(e.getValue()));
        }
        List<String> command = new ArrayList<>();
        for (Object o : (List<Object>) in.getOrDefault("command", List.of())) {
          command.add(String.valueOf(o));
        }
        if (command.isEmpty()) {
          return new Error(400, "command is empty");
        }
        List<Map<String, Object>> resources = new ArrayList<>();
        for (Object o : (List<Object>) in.getOrDefault("resources", List.of())) {
          resources.add((Map<String, Object>) o);
        }
        slot = new Slot(key, String.valueOf(in.get("name")), String.valueOf(in.get("role")),
            memory, vcores, command, env, resources);
        slot.requestId = nextRequestId++;
        slot.request = ContainerRequest.newBuilder()
            .capability(Resource.newInstance(memory, vcores))
            .priority(Priority.newInstance(1))
            .allocationRequestId(slot.requestId)
            .relaxLocality(true)
            .build();
        slots.put(key, slot);
        byRequest.put(slot.requestId, slot);
        rm.addContainerRequest(slot.request);
        log("asked a container for " + key + ": " + memory + " MB, " + vcores + " vcores");
      }
      long deadline = System.currentTimeMillis() + waitMs;
      while (slot.state.equals("requested") || slot.state.equals("allocated")) {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
          break;
        }
        lock.wait(left);
      }
      return slot.toJson();
    }
  }

  private Object release(String key) {
    synchronized (lock) {
      Slot slot = slots.get(key);
      if (slot == null) {
        return new Error(404, "no executor " + key);
      }
      if (slot.state.equals("requested")) {
        rm.removeContainerRequest(slot.request);
        slot.state = "released";
      } else if (slot.state.equals("allocated") || slot.state.equals("running")) {
        slot.state = "releasing";
        rm.releaseAssignedContainer(slot.container.getId());
      }
      lock.notifyAll();
      return slot.toJson();
    }
  }

  private Object resize(String key, Map<String, Object> in) throws InterruptedException {
    long waitMs = (long) (num(in, "wait_s", 0) * 1000);
    Resource target = Resource.newInstance((long) num(in, "memory_mb", -1), (int) num(in, "vcores", -1));
    synchronized (lock) {
      Slot slot = slots.get(key);
      if (slot == null) {
        return new Error(404, "no executor " + key);
      }
      if (!slot.state.equals("running") || slot.container == null) {
        return new Error(409, key + " is " + slot.state + ", not running: nothing to resize");
      }
      if (slot.resizeState.equals("pending")) {
        return new Error(409, key + " has a resize in flight");
      }
      if (target.getMemorySize() <= 0 || target.getVirtualCores() <= 0) {
        return new Error(400, "memory_mb and vcores must be positive");
      }
      Resource now = slot.container.getResource();
      slot.resizeTarget = target;
      slot.resizeAskedAt = System.currentTimeMillis();
      slot.resizeError = null;
      slot.resizeAppliedAt = 0;
      if (fits(target, now)) {
        slot.resizeState = "applied";
        slot.resizeAppliedAt = slot.resizeAskedAt;
        return slot.toJson();
      }
      if (maxCapability != null
          && (target.getMemorySize() > maxCapability.getMemorySize()
              || target.getVirtualCores() > maxCapability.getVirtualCores())) {
        slot.resizeState = "refused";
        slot.resizeError = "above the cluster's maximum allocation " + maxCapability;
        return slot.toJson();
      }
      slot.resizeState = "pending";
      // One dimension up and the other down: grow first (to the larger of each), then shrink.
      Resource step = Resource.newInstance(
          Math.max(target.getMemorySize(), now.getMemorySize()),
          Math.max(target.getVirtualCores(), now.getVirtualCores()));
      boolean grow = !fits(step, now);
      requestUpdate(slot, grow ? step : target, grow);
      long deadline = System.currentTimeMillis() + waitMs;
      while (slot.resizeState.equals("pending")) {
        Resource cur = slot.container.getResource();
        if (grow && fits(step, cur) && !fits(target, cur)) {
          requestUpdate(slot, target, false);
          grow = false;
        }
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
          break;
        }
        lock.wait(Math.min(left, 200));
      }
      return slot.toJson();
    }
  }

  private void requestUpdate(Slot slot, Resource r, boolean increase) {
    Container c = slot.container;
    rm.requestContainerUpdate(c, UpdateContainerRequest.newInstance(
        c.getVersion(), c.getId(),
        increase ? ContainerUpdateType.INCREASE_RESOURCE : ContainerUpdateType.DECREASE_RESOURCE, r, null));
    log("asked " + (increase ? "increase" : "decrease") + " of " + c.getId() + " to " + r);
  }

  private Object adopt(String key, Map<String, Object> in) {
    ContainerId id = ContainerId.fromString(String.valueOf(in.get("container")));
    synchronized (lock) {
      Slot existing = slots.get(key);
      if (existing != null) {
        return existing.toJson();
      }
      ContainerStatus ended = previousEnded.get(id);
      if (ended != null) {
        return new Error(410, id + " ended while the ApplicationMaster restarted: " + ended.getDiagnostics()
            + " (exit " + ended.getExitStatus() + ")");
      }
      Container c = previous.remove(id);
      if (c == null) {
        return new Error(404, "no running container " + id + " of an earlier attempt");
      }
      Slot slot = new Slot(key, String.valueOf(in.get("name")), String.valueOf(in.get("role")),
          (int) c.getResource().getMemorySize(), c.getResource().getVirtualCores(),
          List.of(), Map.of(), List.of());
      slot.container = c;
      slot.state = "running";
      slot.adopted = true;
      slots.put(key, slot);
      byContainer.put(id, slot);
      log("adopted " + id + " as " + key);
      return slot.toJson();
    }
  }

  private Object releaseUnclaimed() {
    List<Object> released = new ArrayList<>();
    synchronized (lock) {
      for (ContainerId id : previous.keySet()) {
        rm.releaseAssignedContainer(id);
        released.add(id.toString());
      }
      previous.clear();
    }
    return Json.map("released", released);
  }

  private void finish(FinalApplicationStatus status, String message) {
    synchronized (lock) {
      if (finishing) {
        return;
      }
      finishing = true;
    }
    try {
      rm.unregisterApplicationMaster(status, message, null);
      log("unregistered: " + status + " " + message);
    } catch (Exception e) {
      log("unregister failed: " + e);
    }
    http.stop(1);
    Runtime.getRuntime().halt(0);
  }

  private static double num(Map<String, Object> in, String key, double fallback) {
    Object v = in.get(key);
    if (v == null) {
      return fallback;
    }
    if (!(v instanceof Number)) {
      throw new IllegalArgumentException(key + " must be a number");
    }
    return ((Number) v).doubleValue();
  }

  private static void respond(HttpExchange ex, int code, Object body) throws IOException {
    byte[] out = Json.write(body).getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/json");
    ex.sendResponseHeaders(code, out.length);
    try (OutputStream os = ex.getResponseBody()) {
      os.write(out);
    }
  }
}
