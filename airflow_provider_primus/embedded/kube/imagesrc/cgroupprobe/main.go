// Command cgroupprobe prints, every 0.2 s, the CPU quota and memory limit of the cgroup it runs in,
// as read from inside its own container, one JSON object a line: a test reads them from the pod's
// log to see a resize reach the container itself, not just the pod's status.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// read returns the first of the files that exists, trimmed; "" when none does.
func read(paths ...string) string {
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(data))
		}
	}
	return ""
}

// number is -1 for "max" (no limit) and for what cannot be read.
func number(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return v
}

func sample() (quota, period, memory int64, version int) {
	if max := read("/sys/fs/cgroup/cpu.max"); max != "" { // cgroup v2
		fields := strings.Fields(max)
		quota, period = number(fields[0]), -1
		if len(fields) > 1 {
			period = number(fields[1])
		}
		return quota, period, number(read("/sys/fs/cgroup/memory.max")), 2
	}
	quota = number(read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"))
	period = number(read("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"))
	return quota, period, number(read("/sys/fs/cgroup/memory/memory.limit_in_bytes")), 1
}

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for seq := 0; ; seq++ {
		quota, period, memory, version := sample()
		fmt.Printf("{\"seq\":%d,\"cgroup\":%d,\"cpu_quota_us\":%d,\"cpu_period_us\":%d,\"memory_limit_bytes\":%d}\n",
			seq, version, quota, period, memory)
		select {
		case <-stop:
			return
		case <-ticker.C:
		}
	}
}
