package profile

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSON writes the call tree as one line of compact JSON, each node an
// object with Node's field names ("name", "kind", "self", "total",
// "children", …). Invalid UTF-8 in names is replaced by U+FFFD, and <, > and
// & are escaped as \u003c etc., so the output is also safe to embed in HTML.
func WriteJSON(w io.Writer, root *Node) error {
	if err := json.NewEncoder(w).Encode(root); err != nil {
		return fmt.Errorf("encode tree as json: %w", err)
	}
	return nil
}
