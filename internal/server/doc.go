// Package server is the HTTP API of the flint agent and of flint server,
// and a client for it: stored profiles and series over any time range,
// differential profiles, label discovery, a live CPU profile compatible
// with net/http/pprof, metrics and a health check. docs/API.md documents
// every route.
//
// The agent and flint server serve it:
//
//	api, err := server.Start(server.Endpoint{Addr: addr}, server.Options{Store: st, Live: sampler, Metrics: m.Write, Token: token})
//	…
//	api.Shutdown(ctx)
//
// and anyone reads it:
//
//	curl 'http://127.0.0.1:7070/api/v1/profile?from=now-15m&selector={comm="api"}&format=svg' > cpu.svg
//	go tool pprof 'http://127.0.0.1:7070/debug/pprof/profile?seconds=10&pid=4242'
//	go tool pprof 'http://127.0.0.1:7070/api/v1/profile?from=now-1h&format=pprof'
//
// Start refuses an address beyond loopback without a token and bounds
// the time a client may take. Without a token, only requests whose Host
// names a loopback address, localhost or one of Options.AllowHosts are
// answered. With a token every request but /healthz carries it in the
// Authorization header, as a bearer token or as the password of HTTP basic
// authentication, which is what go tool pprof sends for a URL with user
// information:
//
//	curl -H "Authorization: Bearer $TOKEN" http://node:7070/api/v1/labels
//	go tool pprof "http://flint:$TOKEN@node:7070/debug/pprof/profile?seconds=30"
package server
