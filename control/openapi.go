package control

import (
	_ "embed" // the OpenAPI document
	"net/http"
)

// openAPIDocument is the HTTP API as an OpenAPI 3.1 document, served at /v1/openapi.json.
// TestOpenAPIMatchesTheRoutes (package cli) fails when a route of `whilly serve` is missing
// from it or it names one that does not exist.
//
//go:embed openapi.json
var openAPIDocument string

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API.
func OpenAPI() []byte { return []byte(openAPIDocument) }

func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write([]byte(openAPIDocument))
}
