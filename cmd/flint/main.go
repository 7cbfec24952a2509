// Command flint is an eBPF CPU profiler and performance doctor for Linux
// services.
//
//	sudo flint record -p 4242 -d 10s -o cpu.svg
//	sudo flint record -a -d 30s -F 99 -o node.pb.gz
//	sudo flint record --container 3f2a -o c.folded
//	sudo flint doctor -p 4242 -d 10s
//	sudo flint syscalls -p 4242 -d 10s
//	flint query --since 15m --selector '{comm="api"}' -o api.svg
//	flint server --store clickhouse://ch.internal:8123/flint --listen 0.0.0.0:7070 --token-file /run/secrets/flint
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `flint: an eBPF CPU profiler for Linux services

Usage:
  flint agent [--data-dir /var/lib/flint] [--listen 127.0.0.1:7070]
  flint server --store clickhouse://HOST:8123/flint [--listen 127.0.0.1:7070] [--token-file FILE]
  flint record [-p PID | -a | --container ID] [-d 10s] [-F 99] [-o out.svg]
  flint query  [--since 15m] [--selector '{comm="api"}'] [-o out.svg] [--diff]
  flint top    [--since 15m] [--selector SEL] [-n 20] [--cum]
  flint series [--since 1h] [--by comm] [--step 10s] [--json]
  flint findings [--since 1h] [--selector SEL] [--json]
  flint trace  (-p PID | --exe PATH) [-d 10s] [--latency] [--json] FUNCTION...
  flint doctor [-p PID | -a | --container ID] [-d 10s] [--json]
  flint syscalls (-p PID | -a -s LIST | --container ID -s LIST) [-d 10s] [--json]
  flint version

Run 'flint COMMAND -h' for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "flint: "+err.Error())
		}
		code := 1
		var u usageError
		if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
			code = 2
		}
		os.Exit(code)
	}
}

// usageError is a mistake on the command line (exit status 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return usageError{errors.New("no command given")}
	}
	switch args[0] {
	case "agent":
		return runAgent(args[1:])
	case "server":
		return runServer(args[1:])
	case "record":
		return record(args[1:])
	case "query":
		return query(args[1:], os.Stdout, os.Stderr)
	case "top":
		return top(args[1:], os.Stdout)
	case "series":
		return series(args[1:], os.Stdout)
	case "findings":
		return findings(args[1:], os.Stdout)
	case "trace":
		return traceCmd(args[1:], os.Stdout, os.Stderr)
	case "doctor":
		return doctorCmd(args[1:], os.Stdout, os.Stderr)
	case "syscalls":
		return syscallsCmd(args[1:], os.Stdout, os.Stderr)
	case jvmHelper:
		return jvmPerfMap(args[1:])
	case "version", "--version":
		fmt.Println("flint", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return usageError{fmt.Errorf("unknown command %q (run 'flint help')", args[0])}
}

// parseFlags parses a command's args, printing help, synopsis first, for -h.
func parseFlags(fs *flag.FlagSet, args []string, synopsis string) error {
	// Errors are reported once, in one line, by main; -h prints the flags.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Println(synopsis + "\n\nFlags:")
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}
