// Package webui serves flint's web UI: the TypeScript sources in web/,
// built into dist/ by `make web` and embedded here, so `go build` needs no
// node. CI rebuilds dist/ and fails when it differs from what is committed.
//
// The agent mounts it at the root, beside the API it calls:
//
//	mux.Handle("/", webui.Handler())
//
// The bundle refers to its assets and to the API by relative URLs, so it
// also works behind a proxy that serves the agent under a path prefix.
package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed dist
var dist embed.FS

// asset is one embedded file with what its responses carry.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the UI: index.html at "/" and the bundle's files under
// their paths. Files keep fixed names across builds, so they are sent with
// a content ETag and "Cache-Control: no-cache": browsers revalidate and
// never run a stale bundle against a newer agent. Any other path gets 404
// with a one-line plain-text body, as the agent's other routes do.
func Handler() http.Handler {
	assets, err := load(dist)
	if err != nil {
		// dist is embedded at build time: this is a broken build.
		panic(fmt.Sprintf("webui: %v", err))
	}
	return handler(assets)
}

func load(fsys fs.FS) (map[string]*asset, error) {
	sub, err := fs.Sub(fsys, "dist")
	if err != nil {
		return nil, err
	}
	assets := map[string]*asset{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(body)
		}
		assets["/"+p] = &asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded bundle: %w", err)
	}
	if assets["/index.html"] == nil {
		return nil, fmt.Errorf("embedded bundle has no index.html (run 'make web')")
	}
	return assets, nil
}

func handler(assets map[string]*asset) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/" {
			p = "/index.html"
		}
		a := assets[p]
		if a == nil || p == "/index.html" && r.URL.Path != "/" {
			h := w.Header()
			h.Set("Content-Type", "text/plain; charset=utf-8")
			h.Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, "no such path "+strings.NewReplacer("\r", " ", "\n", " ").Replace(r.URL.Path))
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		if p == "/index.html" {
			// The UI draws on canvases and talks only to this agent.
			h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
			h.Set("Referrer-Policy", "no-referrer")
		}
		// ServeContent answers HEAD, If-None-Match and ranges.
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(a.body))
	})
}
