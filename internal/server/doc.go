// Package server is the flint agent's HTTP API and a client for it: stored
// profiles and series over any time range, differential profiles, label
// discovery, a live CPU profile compatible with net/http/pprof, the agent's
// metrics and a health check. docs/API.md documents every route.
//
// The agent serves it:
//
//	if err := server.CheckListen(addr, token); err != nil {
//		return err
//	}
//	h := server.New(server.Options{Store: st, Live: sampler, Metrics: m.Write, Token: token})
//	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
//
// and anyone reads it:
//
//	curl 'http://127.0.0.1:7070/api/v1/profile?from=now-15m&selector={comm="api"}&format=svg' > cpu.svg
//	go tool pprof 'http://127.0.0.1:7070/debug/pprof/profile?seconds=10&pid=4242'
//	go tool pprof 'http://127.0.0.1:7070/api/v1/profile?from=now-1h&format=pprof'
//
// With a token every request but /healthz carries it, as a bearer token or
// as the password of HTTP basic authentication, which is what go tool
// pprof sends for a URL with user information:
//
//	curl -H "Authorization: Bearer $TOKEN" http://node:7070/api/v1/labels
//	go tool pprof "http://flint:$TOKEN@node:7070/debug/pprof/profile?seconds=30"
package server
