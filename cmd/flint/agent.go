package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/agent"
	"github.com/flint-dev/flint/internal/export"
	"github.com/flint-dev/flint/internal/kube"
	"github.com/flint-dev/flint/internal/otlp"
	"github.com/flint-dev/flint/internal/privilege"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/tracefs"
)

// AgentConfig is what `flint agent` was asked to do.
type AgentConfig struct {
	agent.Options
	// Listen fills Options.API, Token and AllowHosts.
	Listen ListenConfig
	// ExportURLs are the --export targets; Validate makes them
	// Options.Exports.
	ExportURLs []string
	// Receive is what --receive takes: "otlp" or "" (nothing).
	Receive string
	// ReceiveListen is where --receive otlp listens for gRPC, with the
	// API's token and TLS files; Validate puts it in Options.ReceiveOTLP.
	ReceiveListen string
	// RecordOffCPU, OffCPUMin and OffCPUSample are --off-cpu and its
	// bounds; Validate makes them Options.OffCPU.
	RecordOffCPU bool
	OffCPUMin    time.Duration
	OffCPUSample uint
	// Warnings are what Validate allowed but the operator should fix.
	Warnings []string
}

// maxYoungSample bounds --young-sample: one tick in 100 leaves most
// processes' first second at 99 Hz unsampled.
const maxYoungSample = 100

// Validate checks the config, reads the token file and fills the API's
// options from Listen.
func (c *AgentConfig) Validate() error {
	warnings, err := c.Listen.Validate()
	if err != nil {
		return err
	}
	c.Warnings = warnings
	c.API, c.Token, c.AllowHosts = c.Listen.Endpoint, c.Listen.Token, c.Listen.AllowHosts
	switch {
	case c.Frequency <= 0 || c.Frequency > maxFrequency:
		return fmt.Errorf("--frequency %d: must be between 1 and %d Hz", c.Frequency, maxFrequency)
	case c.YoungSampleEvery < 1 || c.YoungSampleEvery > maxYoungSample:
		return fmt.Errorf("--young-sample %d: must be between 1 and %d", c.YoungSampleEvery, maxYoungSample)
	case c.Window < time.Second || c.Window > time.Hour:
		return fmt.Errorf("--window %s: must be between 1s and 1h", c.Window)
	case c.Retention < 0:
		return fmt.Errorf("--retention %s: must not be negative", c.Retention)
	case c.MaxSize < 0:
		return fmt.Errorf("--max-size %d: must not be negative", c.MaxSize)
	case c.MaxSize > 0 && c.MaxSize < 1<<20:
		return fmt.Errorf("--max-size %d: below 1MB leaves no room for a window", c.MaxSize)
	case c.DoctorEvery < 0:
		return fmt.Errorf("--doctor-every %s: must not be negative", c.DoctorEvery)
	case c.DataDir == "":
		return errors.New("--data-dir is empty")
	case c.Transfer != sampler.Aggregate && c.Transfer != sampler.RingBuffer:
		return fmt.Errorf("--transfer %q: want %s or %s", c.Transfer, sampler.Aggregate, sampler.RingBuffer)
	case c.SpoolMax < 1<<20:
		return fmt.Errorf("--spool-max %d: below 1MB leaves no room for a window", c.SpoolMax)
	}
	if err := checkUnwindMemory(c.UnwindMemory); err != nil {
		return err
	}
	if err := checkOffCPU(c.OffCPUMin, c.OffCPUSample); err != nil {
		return err
	}
	c.OffCPU = nil
	if c.RecordOffCPU {
		c.OffCPU = &sampler.OffCPU{Min: c.OffCPUMin, SampleEvery: uint32(c.OffCPUSample)}
	}
	c.Exports = nil
	for _, raw := range c.ExportURLs {
		sender, err := newSender(raw)
		if err != nil {
			return fmt.Errorf("--export: %w", err)
		}
		c.Exports = append(c.Exports, sender)
	}
	switch c.Receive {
	case "":
	case "otlp":
		// The receiver answers what the API answers: a token is needed
		// beyond loopback.
		warnings, err := server.Endpoint{Addr: c.ReceiveListen, TLSCert: c.API.TLSCert, TLSKey: c.API.TLSKey}.Check(c.Token)
		if err != nil {
			return fmt.Errorf("--receive-listen: %w", err)
		}
		c.Warnings = append(c.Warnings, warnings...)
		c.ReceiveOTLP = c.ReceiveListen
	default:
		return fmt.Errorf("--receive %q: the only protocol received is otlp", c.Receive)
	}
	if c.Store == "" {
		return nil
	}
	if err := store.CheckURL(c.Store); err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	return nil
}

// longDuration accepts Go durations plus days ("7d", "1d12h").
type longDuration struct{ d *time.Duration }

func (f longDuration) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f longDuration) Set(s string) error {
	d, err := parseLongDuration(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

func parseLongDuration(s string) (time.Duration, error) {
	var days time.Duration
	if before, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(before)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad duration %q (want e.g. 7d, 36h, 90m)", s)
		}
		days, s = time.Duration(n)*24*time.Hour, after
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 7d, 36h, 90m)", s)
	}
	return days + d, nil
}

// byteSize accepts sizes like 1GB, 500MB, 64KiB or plain bytes.
type byteSize struct{ n *int64 }

func (f byteSize) String() string {
	if f.n == nil {
		return ""
	}
	return strconv.FormatInt(*f.n, 10)
}

func (f byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(strings.ToUpper(num), strings.ToUpper(u.suffix)); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GB, 500MB)", s)
	}
	return int64(f * float64(mult)), nil
}

func parseAgent(args []string) (*AgentConfig, error) {
	c := &AgentConfig{Options: agent.DefaultOptions(), OffCPUMin: sampler.DefaultOffCPUMin, OffCPUSample: 1}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "`directory` of the store (with --store: of the spool)")
	// As flint server's: the default comes from the environment, which
	// keeps a password out of ps, and is not printed by -h.
	c.Store = os.Getenv("FLINT_STORE")
	fs.Func("store", "write windows to this remote store `URL`, clickhouse://host:8123/db?user=U&password_file=F, through a spool in --data-dir (default $FLINT_STORE; empty: SQLite in --data-dir)", func(s string) error {
		c.Store = s
		return nil
	})
	fs.Var(byteSize{&c.SpoolMax}, "spool-max", "with --store, drop the oldest spooled windows beyond this `size` while the store is unreachable")
	fs.IntVar(&c.Frequency, "frequency", c.Frequency, "samples per second per CPU (`Hz`)")
	fs.Func("young-sample", fmt.Sprintf("in a process's first second, sample one tick in `N`, each sample counting N times; 1 samples every tick (default %d)", c.YoungSampleEvery), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		c.YoungSampleEvery = uint32(n)
		return err
	})
	fs.Var(longDuration{&c.Window}, "window", "`duration` of one stored profile")
	fs.Var(longDuration{&c.Retention}, "retention", "drop profiles older than this `duration` (e.g. 7d; 0 keeps all)")
	fs.Var(byteSize{&c.MaxSize}, "max-size", "drop the oldest profiles beyond this SQLite store `size` (e.g. 1GB; 0: no limit)")
	listenFlags(fs, &c.Listen, c.API.Addr)
	fs.StringVar(&c.Node, "node", "", "node `name` labelling every sample (default: host name)")
	fs.StringVar(&c.Kubelet.URL, "kubelet", "", "the kubelet's pod list `URL`, https://NODE_IP:10250/pods, naming pods and containers (default: none)")
	fs.StringVar(&c.Kubelet.TokenFile, "kubelet-token-file", kube.ServiceAccountToken, "`file` of the bearer token the kubelet takes")
	fs.StringVar(&c.Kubelet.CAFile, "kubelet-ca-file", kube.ServiceAccountCA, "`file` of the CA certificates that sign the kubelet's")
	fs.BoolVar(&c.Kubelet.InsecureSkipVerify, "kubelet-insecure-tls", false, "accept any kubelet certificate (kubelets that sign their own)")
	fs.Var(transferFlag{&c.Transfer}, "transfer", "kernel-to-user `path`: aggregate or ringbuf")
	unwindMemoryFlag(fs, &c.UnwindMemory)
	fs.Func("export", "also send every window to this `URL`: otlp://HOST:4317 (OTLP gRPC; otlps:// with TLS), otlphttp://HOST:4318 (OTLP HTTP; otlphttps://), pyroscope://HOST:4040 (pyroscopes://); repeatable", func(s string) error {
		c.ExportURLs = append(c.ExportURLs, s) // checked by Validate, whose errors hide passwords
		return nil
	})
	fs.StringVar(&c.Receive, "receive", "", "also store profiles other profilers send with this `protocol`: otlp (OTLP profiles over gRPC on --receive-listen, and over HTTP on the API at /v1development/profiles)")
	fs.StringVar(&c.ReceiveListen, "receive-listen", "127.0.0.1:4317", "`address` where --receive otlp takes gRPC")
	fs.Var(longDuration{&c.DoctorEvery}, "doctor-every", "run flint doctor's detectors on one window in every `duration` (0: never)")
	fs.BoolVar(&c.RecordOffCPU, "off-cpu", false, "also record where threads wait off the CPU, always, and store it beside the CPU samples (flint query --type off-cpu)")
	fs.Var(durationFlag{&c.OffCPUMin}, "off-cpu-min", "with --off-cpu, the shortest time off the CPU recorded (`duration`)")
	fs.UintVar(&c.OffCPUSample, "off-cpu-sample", c.OffCPUSample, "with --off-cpu, record one span off the CPU in `N`, each counting N times")
	if err := parseFlags(fs, args, "Usage: flint agent [flags]\n\nProfiles every process continuously, stores the profiles and serves the HTTP API."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func runAgent(args []string) error {
	c, err := parseAgent(args)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "flint: ", log.LstdFlags)
	for _, w := range c.Warnings {
		logger.Printf("warning: %s", w)
	}
	c.Logf = logger.Printf
	c.JVMMaps = jvmDumper(logger.Printf)
	defer c.JVMMaps.Close()
	c.Loaded = func() error {
		// The agent's syscall tracer starts at its first examination; mount
		// tracefs for it now, while CAP_SYS_ADMIN is still there. If this
		// fails, the examination says why.
		if c.DoctorEvery > 0 {
			tracefs.Mount()
		}
		kept, err := dropPrivileges(privilege.Agent, logger.Printf)
		if err == nil && kept != 0 {
			logger.Printf("capabilities kept: %s", kept)
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return agent.Run(ctx, c.Options)
}

// newSender returns the export target a --export URL names.
func newSender(raw string) (export.Sender, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL") // url's error would show a password
	}
	switch u.Scheme {
	case "otlp", "otlps", "otlphttp", "otlphttps":
		return otlp.NewSender(u, version)
	case "pyroscope", "pyroscopes":
		return export.NewPyroscope(u, nil)
	}
	return nil, fmt.Errorf("%s: want otlp://, otlps://, otlphttp://, otlphttps://, pyroscope:// or pyroscopes://", u.Redacted())
}
