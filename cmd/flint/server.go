package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store"
)

// ServerConfig is what `flint server` was asked to do: serve the API and
// the web UI over a shared store that agents write to.
type ServerConfig struct {
	// Store is the store's URL, such as clickhouse://ch.internal:8123/flint;
	// default $FLINT_STORE, which keeps its password out of ps.
	Store  string
	Listen ListenConfig
	// MaxQueries bounds the API requests answered at once (429 beyond).
	MaxQueries int
	// QueryTimeout bounds each store query (503 beyond).
	QueryTimeout time.Duration
	// Warnings are what Validate allowed but the operator should fix.
	Warnings []string
}

// The server's defaults: it serves a fleet's users, not one node's, and
// answers from a database made for many queries at once.
const (
	defaultServerQueries = 16
	defaultServerTimeout = time.Minute
	maxServerQueries     = 1024
)

// Validate checks the config and reads the token file.
func (c *ServerConfig) Validate() error {
	if c.Store == "" {
		return errors.New("--store is required, such as clickhouse://ch.internal:8123/flint (or set $FLINT_STORE)")
	}
	if err := store.CheckURL(c.Store); err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	if c.Listen.Addr == "" {
		return errors.New("--listen is empty: flint server only serves the API")
	}
	if c.MaxQueries < 1 || c.MaxQueries > maxServerQueries {
		return fmt.Errorf("--max-queries %d: must be between 1 and %d", c.MaxQueries, maxServerQueries)
	}
	if c.QueryTimeout < time.Second || c.QueryTimeout > time.Hour {
		return fmt.Errorf("--query-timeout %s: must be between 1s and 1h", c.QueryTimeout)
	}
	warnings, err := c.Listen.Validate()
	c.Warnings = warnings
	return err
}

func parseServer(args []string) (*ServerConfig, error) {
	c := &ServerConfig{Store: os.Getenv("FLINT_STORE"), MaxQueries: defaultServerQueries, QueryTimeout: defaultServerTimeout}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	// The default is not printed by -h: it may hold a password.
	fs.Func("store", "the store's `URL`, such as clickhouse://ch.internal:8123/flint (default $FLINT_STORE)", func(s string) error {
		c.Store = s
		return nil
	})
	listenFlags(fs, &c.Listen, defaultListen)
	fs.IntVar(&c.MaxQueries, "max-queries", c.MaxQueries, "`number` of API queries answered at once; more get 429")
	fs.Var(longDuration{&c.QueryTimeout}, "query-timeout", "bound on each store query (`duration`); longer ones get 503")
	if err := parseFlags(fs, args, "Usage: flint server --store URL [--listen 127.0.0.1:7070] [--token-file FILE] [flags]\n\n"+
		"Serves the HTTP API and the web UI over the store the agents write to.\nIt keeps no state: run as many as you need behind a load balancer."); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// defaultListen is where the agent and the server listen unless told.
const defaultListen = "127.0.0.1:7070"

// storeOpener opens the store a URL names.
type storeOpener func(ctx context.Context, url string) (store.Store, error)

// openStore opens the shared store flint server reads: ClickHouse, read
// only. It changes nothing (the schema and retention are the agents'
// job), so its user needs only read rights, it holds no state and any
// number may run.
func openStore(ctx context.Context, dsn string) (store.Store, error) {
	o := store.DefaultOptions()
	o.ReadOnly = true
	return store.OpenClickHouse(ctx, dsn, o)
}

func runServer(args []string) error {
	c, err := parseServer(args)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "flint: ", log.LstdFlags)
	for _, w := range c.Warnings {
		logger.Printf("warning: %s", w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, c, openStore, logger.Printf)
}

// serve opens the store and answers the API until ctx ends, then waits up
// to five seconds for the requests in progress.
func serve(ctx context.Context, c *ServerConfig, open storeOpener, logf func(string, ...any)) error {
	st, err := open(ctx, c.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	api, err := server.Start(c.Listen.Endpoint, server.Options{
		Store:        st,
		Token:        c.Listen.Token,
		AllowHosts:   c.Listen.AllowHosts,
		MaxQueries:   c.MaxQueries,
		QueryTimeout: c.QueryTimeout,
	})
	if err != nil {
		return err
	}
	logf("serving the API and web UI on %s over %s", api.URL(), store.URLName(c.Store))
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	api.Shutdown(shutdown)
	logf("server stopped")
	return nil
}
