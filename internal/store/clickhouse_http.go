package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file is flint's ClickHouse client: SQL over ClickHouse's HTTP
// interface, rows in the RowBinary format both ways. clickhouse-go v2
// refuses ClickHouse 18.16, the oldest release flint supports (see
// docs/STORE.md), and flint needs little of it: POST a query, POST rows,
// read rows.

// ClickHouse error codes flint branches on (ClickHouse's ErrorCodes.cpp).
const (
	chTableAlreadyExists = 57
	chUnknownTable       = 60
	chUnknownDatabase    = 81
	chUnknownUser        = 192
	chWrongPassword      = 193
	chRequiredPassword   = 194
	chIPAddressNotAllow  = 195
	chAuthFailed         = 516
)

// chError is an error ClickHouse answered with.
type chError struct {
	Code int    // ClickHouse's error code; 0 when the answer had none
	Msg  string // its first line, without the code and exception noise
}

func (e *chError) Error() string {
	if e.Code == 0 {
		return e.Msg
	}
	return fmt.Sprintf("code %d: %s", e.Code, e.Msg)
}

func chCode(err error) int {
	var e *chError
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// chDSN is a parsed clickhouse:// URL.
type chDSN struct {
	hosts    []string // host:port, the first used for queries and inserts
	database string
	user     string
	password string
	secure   bool
	timeout  time.Duration
	cluster  string // remote_servers cluster of the Distributed tables; "" for none

	passwordFile string
}

// CheckURL checks the form of a clickhouse:// store URL without reading
// its password file or connecting: for command-line flags.
func CheckURL(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

// parseDSN reads clickhouse://host:8123[,host2:8123…]/database?user=U&
// password=P&password_file=F&secure=1&timeout=10s&cluster=C; the password
// file is read by readPasswordFile, at open.
func parseDSN(dsn string) (chDSN, error) {
	d := chDSN{database: "flint", user: "default", timeout: 30 * time.Second}
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Parse quotes the whole URL, password included: keep it out.
		return d, errors.New("not a URL; want clickhouse://host:8123/database")
	}
	if u.Scheme != "clickhouse" {
		return d, fmt.Errorf("unknown scheme %q; want clickhouse://host:8123/database", u.Scheme)
	}
	if u.Host == "" {
		return d, errors.New("no host; want clickhouse://host:8123/database")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "8123")
		}
		d.hosts = append(d.hosts, h)
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if !validIdentifier(db) {
			return d, fmt.Errorf("clickhouse database name %q: want letters, digits and _", db)
		}
		d.database = db
	}
	if u.User != nil {
		d.user = u.User.Username()
		d.password, _ = u.User.Password()
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "user", "password", "password_file", "secure", "timeout", "cluster":
		default:
			return d, fmt.Errorf("clickhouse URL parameter %q unknown; known: user, password, password_file, secure, timeout, cluster", k)
		}
	}
	if v := q.Get("user"); v != "" {
		d.user = v
	}
	if q.Has("password") {
		d.password = q.Get("password")
	}
	d.passwordFile = q.Get("password_file")
	if v := q.Get("secure"); v != "" {
		if d.secure, err = strconv.ParseBool(v); err != nil {
			return d, fmt.Errorf("clickhouse URL secure=%q: want 1 or 0", v)
		}
	}
	if v := q.Get("timeout"); v != "" {
		if d.timeout, err = time.ParseDuration(v); err != nil || d.timeout <= 0 {
			return d, fmt.Errorf("clickhouse URL timeout=%q: want a positive duration such as 10s", v)
		}
	}
	if d.cluster = q.Get("cluster"); d.cluster != "" && !validIdentifier(d.cluster) {
		return d, fmt.Errorf("clickhouse cluster name %q: want letters, digits and _", d.cluster)
	}
	return d, nil
}

// readPasswordFile reads the password from password_file, if given.
func (d *chDSN) readPasswordFile() error {
	if d.passwordFile == "" {
		return nil
	}
	b, err := os.ReadFile(d.passwordFile)
	if err != nil {
		return fmt.Errorf("clickhouse password file: %w", err)
	}
	d.password = strings.TrimRight(string(b), "\r\n")
	return nil
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validIdentifier(s string) bool { return len(s) <= 64 && identifier.MatchString(s) }

// URLName is a store URL as logs may show it: scheme, hosts and database,
// without user, password or parameters.
func URLName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "the store"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// chClient talks to one ClickHouse server.
type chClient struct {
	base     string // http(s)://host:port/
	database string
	user     string
	password string
	settings url.Values // sent with every request
	http     *http.Client
}

func newClient(d chDSN, host string) *chClient {
	scheme := "http"
	if d.secure {
		scheme = "https"
	}
	return &chClient{
		base:     scheme + "://" + host + "/",
		database: d.database,
		user:     d.user,
		password: d.password,
		settings: url.Values{},
		http:     &http.Client{Timeout: d.timeout},
	}
}

// do posts one request: the query in the URL and body as its data, or the
// query as the body when body is nil. It returns the answer's body, which
// the caller closes, or the error ClickHouse gave as one line.
func (c *chClient) do(ctx context.Context, query string, body io.Reader, settings url.Values) (io.ReadCloser, error) {
	v := url.Values{}
	for k, s := range c.settings {
		v[k] = s
	}
	for k, s := range settings {
		v[k] = s
	}
	if c.database != "" {
		v.Set("database", c.database)
	}
	if body != nil {
		v.Set("query", query)
	} else {
		body = strings.NewReader(query)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"?"+v.Encode(), body)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(c.user, c.password)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL holds the query; say only what went wrong
		}
		return nil, fmt.Errorf("clickhouse at %s unreachable: %w", c.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, answerError(c.base, resp, b)
	}
	return resp.Body, nil
}

// exec runs a statement that returns nothing flint reads.
func (c *chClient) exec(ctx context.Context, query string, settings url.Values) error {
	r, err := c.do(ctx, query, nil, settings)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, r)
	r.Close()
	return err
}

// insert sends rows, already in RowBinary, to table.
func (c *chClient) insert(ctx context.Context, table string, rows []byte, settings url.Values) error {
	r, err := c.do(ctx, "INSERT INTO "+table+" FORMAT RowBinary", bytes.NewReader(rows), settings)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, r)
	r.Close()
	return err
}

// query runs a SELECT (FORMAT RowBinary is appended) and calls f for each
// row; f reads the row's columns from r in order.
func (c *chClient) query(ctx context.Context, query string, settings url.Values, f func(r *rowReader) error) error {
	body, err := c.do(ctx, query+" FORMAT RowBinary", nil, settings)
	if err != nil {
		return err
	}
	defer body.Close()
	// Answers are read whole: they are bounded by the query limits, and
	// ClickHouse reports an error met after the first rows at the end of
	// the body, which a streaming reader would take for a row.
	b, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	r := &rowReader{b: b}
	for len(r.b) > 0 && r.err == nil {
		if err := f(r); err != nil {
			return err
		}
	}
	if r.err != nil {
		if i := bytes.Index(b, []byte("Code: ")); i >= 0 {
			return parseError(b[i:])
		}
		return r.err
	}
	return nil
}

// codeLine matches the start of ClickHouse's error text in every release
// since 18: "Code: 60, e.displayText() = DB::Exception: …" (before 21) and
// "Code: 60. DB::Exception: …" (since).
var codeLine = regexp.MustCompile(`^Code: (\d+)[,.] (?:e\.displayText\(\) = )?(?:DB::Exception: )?`)

// answerError makes an error of a non-200 answer.
func answerError(base string, resp *http.Response, b []byte) error {
	if bytes.HasPrefix(b, []byte("Code: ")) {
		return parseError(b)
	}
	return fmt.Errorf("%s is not a ClickHouse HTTP interface: it answered %s", base, resp.Status)
}

func parseError(b []byte) error {
	line, _, _ := strings.Cut(string(b), "\n")
	e := &chError{}
	if m := codeLine.FindStringSubmatch(line); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
		line = line[len(m[0]):]
	}
	line = strings.TrimSuffix(line, ", e.what() = DB::Exception")
	if i := strings.Index(line, " (version "); i > 0 {
		line = line[:i]
	}
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	e.Msg = line
	return e
}

// rowReader reads RowBinary columns; the first error sticks.
type rowReader struct {
	b   []byte
	err error
}

var errShortRow = errors.New("clickhouse answer ends inside a row")

func (r *rowReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errShortRow
		r.b = nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *rowReader) uint64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *rowReader) int64() int64 { return int64(r.uint64()) }

func (r *rowReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortRow
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns a String column, valid until the next query.
func (r *rowReader) bytes() []byte {
	n := r.uvarint()
	if n > math.MaxInt32 {
		r.err = errShortRow
		return nil
	}
	return r.take(int(n))
}

func (r *rowReader) string() string { return string(r.bytes()) }

// strings reads an Array(String) column.
func (r *rowReader) strings() []string {
	n := r.uvarint()
	if n > uint64(len(r.b)) { // each string takes a byte at least
		r.err = errShortRow
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, r.string())
	}
	return out
}

// rowWriter appends RowBinary columns.
type rowWriter struct{ b []byte }

func (w *rowWriter) uint64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *rowWriter) int64(v int64)   { w.uint64(uint64(v)) }
func (w *rowWriter) uint32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *rowWriter) uint8(v uint8)   { w.b = append(w.b, v) }

// date appends a Date: days since 1970-01-01 as a UInt16.
func (w *rowWriter) date(d uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, d) }

func (w *rowWriter) string(s string) { w.b = appendString(w.b, s) }

func (w *rowWriter) strings(ss []string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(ss)))
	for _, s := range ss {
		w.string(s)
	}
}

// quote makes s a ClickHouse string literal of the same bytes. Quotes and
// backslashes are escaped, and every byte outside printable ASCII becomes
// \xHH, so the literal is plain ASCII whatever s holds (ClickHouse reads
// \x escapes since 18.x, and in every release since).
func quote(s string) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+2)
	b = append(b, '\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '\''))
}

// quoteJoin quotes each of ss and joins them with commas: the inside of
// an IN list or an array literal.
func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ",")
}
