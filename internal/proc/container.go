package proc

import (
	"regexp"
	"strings"
)

// Container runtimes name cgroups after the 64-hex-digit container ID:
// docker (/docker/ID, docker-ID.scope), containerd (cri-containerd-ID.scope,
// /kubepods/.../ID), cri-o (crio-ID.scope), podman (libpod-ID.scope).
var containerID = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)`)

// Kubernetes pod cgroups: /kubepods/burstable/pod<UID>/ (cgroupfs driver) or
// kubepods-burstable-pod<UID with _>.slice (systemd driver).
var podUID = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// ParseContainer extracts the container ID and pod UID from the contents of
// /proc/PID/cgroup (any hierarchy); "" when absent.
func ParseContainer(cgroup string) (container, pod string) {
	for line := range strings.Lines(cgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		if container == "" {
			if m := containerID.FindStringSubmatch(lastContainerSegment(path)); m != nil {
				container = m[1]
			}
		}
		if pod == "" {
			if m := podUID.FindStringSubmatch(path); m != nil {
				pod = strings.ReplaceAll(m[1], "_", "-")
			}
		}
	}
	return container, pod
}

// lastContainerSegment keeps the path from the last segment holding a
// container ID, so nested runtimes (docker in docker) report the innermost.
func lastContainerSegment(path string) string {
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if containerID.MatchString("/" + segs[i]) {
			return "/" + segs[i]
		}
	}
	return path
}
