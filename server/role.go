package server

import "context"

// Role is the role of key ("operator", "workspace" or "agent"); ok is
// false when the key is unknown, revoked or cannot be looked up. The MCP
// tools use it to list to each key the tools it may call.
func (s *Server) Role(ctx context.Context, key string) (role string, ok bool) {
	k, _, ok := s.authenticateLive(ctx, key)
	if !ok {
		return "", false
	}
	return string(k.Role), true
}
