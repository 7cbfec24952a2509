//go:build !(linux && (amd64 || arm64))

package doctor

// syscallNames is empty where flint has no table: syscalls show as numbers.
var syscallNames = map[uint32]string{}
