package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/flint-dev/flint/internal/profile"
)

// ErrNoAgent reports that nothing accepts connections at a client's URL.
var ErrNoAgent = errors.New("no agent")

// Error is an error response of the API.
type Error struct {
	Status  int    // HTTP status code
	Message string // the response's one-line message
}

// Error formats e as "400: bad selector …".
func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Client calls a flint agent's HTTP API.
type Client struct {
	URL   string       // base URL, such as http://127.0.0.1:7070
	Token string       // sent as a bearer token when not empty
	HTTP  *http.Client // nil: http.DefaultClient
}

// Get requests path (such as "/api/v1/profile") with query q and returns
// the response body, which the caller closes. A status other than 200 is
// an *Error; a refused connection wraps ErrNoAgent.
func (c *Client) Get(ctx context.Context, path string, q url.Values) (io.ReadCloser, error) {
	u := strings.TrimSuffix(c.URL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", path, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s", ErrNoAgent, c.URL)
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, &Error{Status: resp.StatusCode, Message: errorMessage(resp)}
	}
	return resp.Body, nil
}

// errorMessage reads the one-line message of an error response: the
// "error" member of a JSON body, or else the first line of the body.
func errorMessage(resp *http.Response) string {
	body := io.LimitReader(resp.Body, 64<<10)
	if t, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); t == "application/json" {
		var e struct {
			Error string `json:"error"`
		}
		if json.NewDecoder(body).Decode(&e) == nil && e.Error != "" {
			return e.Error
		}
		return http.StatusText(resp.StatusCode)
	}
	line, _ := bufio.NewReader(body).ReadString('\n')
	if line = strings.TrimSpace(line); line != "" {
		return line
	}
	return http.StatusText(resp.StatusCode)
}

// getJSON decodes the JSON response of path into v.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	body, err := c.Get(ctx, path, q)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// Tree fetches /api/v1/profile in the JSON format: the call tree of the
// profile q selects (from, to, selector; format is set here).
func (c *Client) Tree(ctx context.Context, q url.Values) (*profile.Node, error) {
	q = cloneValues(q)
	q.Set("format", string(profile.FormatJSON))
	var root profile.Node
	if err := c.getJSON(ctx, "/api/v1/profile", q, &root); err != nil {
		return nil, err
	}
	return &root, nil
}

// Series fetches /api/v1/series with parameters q.
func (c *Client) Series(ctx context.Context, q url.Values) (*SeriesResponse, error) {
	var s SeriesResponse
	if err := c.getJSON(ctx, "/api/v1/series", q, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Findings fetches /api/v1/findings with parameters q.
func (c *Client) Findings(ctx context.Context, q url.Values) (*FindingsResponse, error) {
	var f FindingsResponse
	if err := c.getJSON(ctx, "/api/v1/findings", q, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q)+1)
	for k, v := range q {
		c[k] = append([]string(nil), v...)
	}
	return c
}
