package doctor

//go:generate go run gensysnames.go

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type call_key -type call_stats -type call_stack_key -type user_stack -type call_flag -type syscall_tracer_stat syscalls ../../bpf/syscalls.bpf.c -- -I../../bpf
