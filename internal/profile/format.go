package profile

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Format is an output encoding of a profile.
type Format string

// Formats flint writes.
const (
	FormatSVG    Format = "svg"
	FormatHTML   Format = "html"
	FormatPprof  Format = "pprof"
	FormatFolded Format = "folded"
	FormatJSON   Format = "json"
)

// Formats lists every format, for help and error messages.
var Formats = []Format{FormatSVG, FormatHTML, FormatPprof, FormatFolded, FormatJSON}

// ParseFormat checks a format name.
func ParseFormat(name string) (Format, error) {
	for _, f := range Formats {
		if string(f) == name {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q (want one of %s)", name, formatList())
}

// FormatOf picks the format from an output path's extension.
func FormatOf(path string) (Format, error) {
	for ext, f := range map[string]Format{
		".svg": FormatSVG, ".html": FormatHTML, ".htm": FormatHTML,
		".pb.gz": FormatPprof, ".pprof": FormatPprof, ".pb": FormatPprof,
		".pgo":    FormatPprof, // default.pgo, the profile go build -pgo=auto reads
		".folded": FormatFolded, ".txt": FormatFolded, ".json": FormatJSON,
	} {
		if strings.HasSuffix(path, ext) {
			return f, nil
		}
	}
	return "", fmt.Errorf("cannot tell the format of %q from its extension: use --format (%s)", path, formatList())
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// Write encodes p in format f; title heads the flame graphs.
func Write(w io.Writer, p *Profile, f Format, title string) error {
	switch f {
	case FormatPprof:
		return WritePprof(w, p)
	case FormatFolded:
		bw := bufio.NewWriter(w)
		for _, line := range p.Folded() {
			bw.WriteString(line)
			bw.WriteByte('\n')
		}
		return bw.Flush()
	case FormatJSON:
		return WriteJSON(w, p.Tree())
	case FormatSVG:
		return WriteSVG(w, p.Tree(), title)
	case FormatHTML:
		return WriteHTML(w, p.Tree(), title)
	}
	return fmt.Errorf("unknown format %q", f)
}
