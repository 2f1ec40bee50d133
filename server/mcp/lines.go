package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"unicode/utf8"
)

// JSON-RPC error codes of lines that are not requests.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// Bounds of one stdio line: longer lines, and deeper nesting, are refused
// without being parsed.
const (
	maxLineBytes = 1 << 20
	maxLineDepth = 64
)

// lineFilter sits between a stdio client's input and the SDK, which ends
// the whole session on the first line it cannot read: each line that is
// not one JSON-RPC message (not JSON, invalid UTF-8, a batch, nested
// deeper than maxLineDepth, longer than maxLineBytes, not a request,
// notification or answer) is answered with a JSON-RPC error through
// reject, -32700 or -32600 with its id where one can be read, and not
// passed on; the session goes on, and no answer already due is lost.
type lineFilter struct {
	br      *bufio.Reader
	reject  func(answer []byte)
	pending []byte // a checked line, handed out by Read
	err     error  // the input's end, once every line before it is out
}

func newLineFilter(r io.Reader, reject func([]byte)) *lineFilter {
	return &lineFilter{br: bufio.NewReaderSize(r, 64<<10), reject: reject}
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, tooLong, err := f.readLine()
		if err != nil {
			f.err = err
		}
		switch {
		case tooLong:
			f.reject(rpcError(nil, codeInvalidRequest, "Invalid Request: a line longer than "+strconv.Itoa(maxLineBytes)+" bytes"))
		case len(bytes.TrimSpace(line)) == 0:
		default:
			if answer := checkLine(line); answer != nil {
				f.reject(answer)
			} else {
				f.pending = append(line, '\n')
			}
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// readLine reads up to the next newline (not included); a line past
// maxLineBytes is read to its end and dropped (tooLong).
func (f *lineFilter) readLine() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := f.br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > maxLineBytes+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return line, tooLong, err
	}
}

// checkLine returns the error answer of a line that is not one JSON-RPC
// message, or nil.
func checkLine(line []byte) []byte {
	if !utf8.Valid(line) {
		return rpcError(nil, codeParseError, "Parse error: the line is not valid UTF-8")
	}
	if depth(line) > maxLineDepth {
		return rpcError(nil, codeInvalidRequest, "Invalid Request: nested deeper than "+strconv.Itoa(maxLineDepth)+" levels")
	}
	if !json.Valid(line) {
		return rpcError(nil, codeParseError, "Parse error: the line is not JSON")
	}
	t := bytes.TrimSpace(line)
	switch t[0] {
	case '{':
	case '[':
		if bytes.Equal(bytes.Join(bytes.Fields(t), nil), []byte("[]")) {
			return rpcError(nil, codeInvalidRequest, "Invalid Request: an empty batch")
		}
		return rpcError(nil, codeInvalidRequest, "Invalid Request: batches are not supported; send one message a line")
	default:
		return rpcError(nil, codeInvalidRequest, "Invalid Request: a message must be a JSON object")
	}
	var m struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(t, &m); err != nil {
		return rpcError(nil, codeInvalidRequest, "Invalid Request: "+err.Error())
	}
	id := m.ID
	if len(id) > 0 && id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') && string(id) != "null" {
		return rpcError(nil, codeInvalidRequest, "Invalid Request: id must be a string or a number")
	}
	switch {
	case m.JSONRPC == nil || *m.JSONRPC != "2.0":
		return rpcError(id, codeInvalidRequest, `Invalid Request: "jsonrpc" must be "2.0"`)
	case len(m.Method) > 0:
		if m.Method[0] != '"' {
			return rpcError(id, codeInvalidRequest, "Invalid Request: method must be a string")
		}
	case len(id) > 0 && (len(m.Result) > 0 || len(m.Error) > 0):
	default:
		return rpcError(id, codeInvalidRequest, "Invalid Request: neither a request (method) nor an answer (id with result or error)")
	}
	return nil
}

// depth is how deeply b's arrays and objects nest (b need not be JSON).
func depth(b []byte) int {
	d, most, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if d++; d > most {
				most = d
			}
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}

// rpcError is a JSON-RPC error answer with id (null when nil) on one line.
func rpcError(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	m, _ := json.Marshal(msg)
	b = append(b, m...)
	return append(b, "}}\n"...)
}
