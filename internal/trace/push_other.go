//go:build !amd64

package trace

import "reflect"

// calibrationPush returns x; only the amd64 version (in assembly) is probed.
func calibrationPush(x uint64) uint64 { return x }

func calibrationPushAddr() uintptr { return reflect.ValueOf(calibrationPush).Pointer() }
