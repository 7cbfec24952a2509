package agent

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/otlp"
	"github.com/flint-dev/flint/internal/profile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// receiving is the agent's OTLP profiles receiver: over gRPC on
// Options.ReceiveOTLP (with the API's TLS files and token), over HTTP on
// the API.
type receiving struct {
	otlp *otlp.Receiver
	grpc *grpc.Server
	ln   net.Listener
}

// listenReceive listens for OTLP over gRPC (before the agent drops the
// capability a port below 1024 needs); start serves it.
func (a *Agent) listenReceive() (*receiving, error) {
	ln, err := net.Listen("tcp", a.o.ReceiveOTLP)
	if err != nil {
		return nil, fmt.Errorf("receive OTLP: %w", err)
	}
	r := &receiving{otlp: otlp.NewReceiver(a.store, a.o.Logf), ln: ln}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(otlp.MaxRequest)}
	if a.o.API.TLSCert != "" {
		creds, err := credentials.NewServerTLSFromFile(a.o.API.TLSCert, a.o.API.TLSKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("receive OTLP: %w", err)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	if a.o.Token != "" {
		opts = append(opts, grpc.UnaryInterceptor(tokenCheck(a.o.Token)))
	}
	r.grpc = grpc.NewServer(opts...)
	r.otlp.RegisterGRPC(r.grpc)
	return r, nil
}

func (r *receiving) start() { go r.grpc.Serve(r.ln) }

func (r *receiving) stop() { r.grpc.GracefulStop() }

// store writes a received profile like a window of the agent's own; one
// whose sender gave no time is taken as ending now.
func (a *Agent) store(ctx context.Context, p *profile.Profile) error {
	if p.Start.IsZero() {
		p.Start = time.Now().Add(-p.Duration)
	}
	return a.write(p, nil)
}

// tokenCheck requires the API's token in the "authorization" metadata, as
// "Bearer TOKEN", compared in constant time.
func tokenCheck(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, got := range md.Get("authorization") {
			if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) == 1 {
				return handler(ctx, req)
			}
		}
		return nil, status.Error(codes.Unauthenticated, "missing or wrong token (send authorization: Bearer TOKEN)")
	}
}
