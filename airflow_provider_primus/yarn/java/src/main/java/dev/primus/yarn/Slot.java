package dev.primus.yarn;

import java.util.List;
import java.util.Map;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;

/**
 * One executor incarnation as the ApplicationMaster tracks it, from the ask to the container's end.
 * States: requested (asked, not allocated), allocated (starting on its NodeManager), running,
 * releasing (we asked for its end), released, completed (ended on its own or was lost: its exit
 * status and diagnostics say which), failed (could not be started). Guarded by the AM's lock.
 */
final class Slot {
  final String key;
  final String name;
  final String role;
  final int askedMemoryMb;
  final int askedVcores;
  final List<String> command;
  final Map<String, String> env;
  final List<Map<String, Object>> resources;
  long requestId = -1;
  ContainerRequest request;
  Container container;
  String state = "requested";
  Integer exitStatus;
  String diagnostics;
  boolean adopted;
  final long askedAt = System.currentTimeMillis();
  long allocatedAt;
  long startedAt;
  // The resize in flight or last done: none | pending | applied | refused.
  String resizeState = "none";
  String resizeError;
  Resource resizeTarget;
  long resizeAskedAt;
  long resizeAppliedAt;

  Slot(
      String key,
      String name,
      String role,
      int memoryMb,
      int vcores,
      List<String> command,
      Map<String, String> env,
      List<Map<String, Object>> resources) {
    this.key = key;
    this.name = name;
    this.role = role;
    this.askedMemoryMb = memoryMb;
    this.askedVcores = vcores;
    this.command = command;
    this.env = env;
    this.resources = resources;
  }

  boolean live() {
    return state.equals("requested") || state.equals("allocated") || state.equals("running");
  }

  Map<String, Object> toJson() {
    Map<String, Object> m =
        Json.map(
            "key", key,
            "name", name,
            "role", role,
            "state", state,
            "adopted", adopted,
            "asked_memory_mb", askedMemoryMb,
            "asked_vcores", askedVcores,
            "asked_at", askedAt,
            "allocated_at", allocatedAt,
            "started_at", startedAt,
            "exit_status", exitStatus,
            "diagnostics", diagnostics);
    if (container != null) {
      m.put("container", container.getId().toString());
      m.put("node", container.getNodeId().toString());
      m.put("node_http", container.getNodeHttpAddress());
      m.put("memory_mb", container.getResource().getMemorySize());
      m.put("vcores", container.getResource().getVirtualCores());
      m.put("version", container.getVersion());
    }
    m.put(
        "resize",
        Json.map(
            "state", resizeState,
            "error", resizeError,
            "memory_mb", resizeTarget == null ? null : resizeTarget.getMemorySize(),
            "vcores", resizeTarget == null ? null : resizeTarget.getVirtualCores(),
            "asked_at", resizeAskedAt,
            "applied_at", resizeAppliedAt));
    return m;
  }
}
