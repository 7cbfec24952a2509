package kube

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Pod is what flint needs of one pod of the kubelet's list.
type Pod struct {
	UID, Namespace, Name string
	// Containers that have been created: app, init and ephemeral ones.
	Containers []Container
}

// Container is one started container of a pod.
type Container struct {
	// ID as the cgroup path has it: the runtime's ID without the
	// "containerd://" (or "cri-o://", "docker://") prefix.
	ID   string
	Name string
}

// podList is the part of a v1 PodList that ParsePods reads.
type podList struct {
	Kind  string `json:"kind"`
	Items []struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			UID       string `json:"uid"`
		} `json:"metadata"`
		Status struct {
			ContainerStatuses          []containerStatus `json:"containerStatuses"`
			InitContainerStatuses      []containerStatus `json:"initContainerStatuses"`
			EphemeralContainerStatuses []containerStatus `json:"ephemeralContainerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

type containerStatus struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID"`
}

// ParsePods reads a v1 PodList (the kubelet's GET /pods). Pods without a
// UID or a name are left out, and so are containers not started yet (no
// ID): they have no cgroup to be found by.
func ParsePods(body []byte) ([]Pod, error) {
	var l podList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("parse pod list: %w", err)
	}
	if l.Kind != "PodList" {
		return nil, fmt.Errorf("parse pod list: kind %q, want PodList", l.Kind)
	}
	pods := make([]Pod, 0, len(l.Items))
	for _, it := range l.Items {
		m := it.Metadata
		if m.UID == "" || m.Name == "" {
			continue
		}
		p := Pod{UID: m.UID, Namespace: m.Namespace, Name: m.Name}
		st := it.Status
		for _, group := range [][]containerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
			for _, cs := range group {
				if id := containerID(cs.ContainerID); id != "" && cs.Name != "" {
					p.Containers = append(p.Containers, Container{ID: id, Name: cs.Name})
				}
			}
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// containerID strips the runtime's scheme from a status's containerID,
// "containerd://3f2a…", as the cgroup path has the bare ID; "" when s
// is not of that form.
func containerID(s string) string {
	_, id, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(id)
}
