//go:build js && wasm

package main

import (
	"bytes"
	"net/http"
)

// operatorTool answers a call of an operator tool (drills.run,
// drills.cancel, detection.run) as the server's MCP does: by the REST
// route that answers it (the front's own, through answer), with the
// call's key and its arguments as the body ({} for none). A key the
// workspace no longer holds is refused at the HTTP level, as by the lease
// tools.
func operatorTool(r *http.Request, id []byte, t mcpTool, body []byte) reply {
	if body == nil {
		body = []byte("{}")
	}
	req, err := http.NewRequestWithContext(r.Context(), "POST", "https://front"+t.path, bytes.NewReader(body))
	if err != nil {
		return unavailable(err.Error())
	}
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	req.Header.Set("Content-Type", "application/json")
	rep, _ := answer(req)
	if rep.status == 401 {
		return rep
	}
	return reply{status: 200, body: rpcResult(id, toolResult(rep.status, rep.body))}
}
