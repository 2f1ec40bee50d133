package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// PathLedger starts the ledger routes: key, checkpoint, entries, proof,
// consistency and receipt.
const PathLedger = "/api/v1/ledger/"

// MaxLedgerAnswerBytes bounds a ledger answer (a page of 1000 entries).
const MaxLedgerAnswerBytes = 16 << 20

// Ledger GETs the ledger route named by route, with its query (for
// example "entries?start=0&count=1000"), and returns the status and body.
// A refusal is an answer; err is a transport failure.
func (c *Client) Ledger(ctx context.Context, route string) (status int, body []byte, retryAfter time.Duration, err error) {
	return c.ledger(ctx, http.MethodGet, route)
}

// LedgerExported records that the first size entries of the ledger, whose
// tree has root root (base64), were exported: the plane may then drop
// their bodies after its retention period. It needs a workspace or
// operator key.
func (c *Client) LedgerExported(ctx context.Context, size int64, root string) (status int, body []byte, err error) {
	status, body, _, err = c.ledger(ctx, http.MethodPost, "exported?size="+strconv.FormatInt(size, 10)+"&root="+url.QueryEscape(root))
	return status, body, err
}

func (c *Client) ledger(ctx context.Context, method, route string) (status int, body []byte, retryAfter time.Duration, err error) {
	u := c.base + PathLedger + route
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("leaseplane client: ledger %s: %w", route, err)
	}
	resp, err := c.transport(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxLedgerAnswerBytes+1))
	if err != nil {
		return 0, nil, 0, fmt.Errorf("leaseplane client: reading the answer of %s %s: %w", method, u, err)
	}
	if len(b) > MaxLedgerAnswerBytes {
		return 0, nil, 0, fmt.Errorf("leaseplane client: the answer of %s %s is over %d bytes", method, u, MaxLedgerAnswerBytes)
	}
	if s := strings.TrimSpace(resp.Header.Get("Retry-After")); s != "" {
		if d, err := time.ParseDuration(s + "s"); err == nil {
			retryAfter = d
		}
	}
	return resp.StatusCode, b, retryAfter, nil
}
