package sampler

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86" -target bpfel -type sample_key -type sample_event -type new_proc -type listed_proc -type listed_mapping_flags -type listing_flags -type quiet_file_key -type quiet_file -type stack_trace -type sampler_stat -type unwind_row -type unwind_proc -type cfa_kind -type python_proc -type python_frame_bits -type python_layout -type python_stack -type python_code -type python_record -type python_room -type proc_exit profile ../../bpf/profile.bpf.c -- -I../../bpf
