// Package ghspec judges HTTP requests against GitHub's published API descriptions: the
// REST OpenAPI description of api.github.com (npm @octokit/openapi) and the GraphQL
// schema (npm @octokit/graphql-schema). The test suite's fake GitHub runs every request
// it receives through a Checker, so that the fake cannot accept what GitHub would refuse.
//
// The descriptions are fetched once from the npm registry at pinned versions, verified
// against their published sha512 integrity and kept in a cache directory outside the
// repository.
package ghspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// ErrNoOperation is wrapped by a refusal of a request for which GitHub's description
// has no operation (GitHub answers 404).
var ErrNoOperation = errors.New("GitHub's API has no such operation")

// exempt are the endpoints GitHub serves outside api.github.com, which its API
// descriptions do not cover: git over smart HTTP, the OAuth web flow, the App manifest
// pages, and the fake's own stand-in for the storage GitHub redirects job logs to.
var exempt = []*regexp.Regexp{
	regexp.MustCompile(`^/[^/]+/[^/]+\.git/(info/refs|git-upload-pack|git-receive-pack)$`),
	regexp.MustCompile(`^/login/oauth/(authorize|access_token)$`),
	regexp.MustCompile(`^(/organizations/[^/]+)?/settings/apps/new$`),
	regexp.MustCompile(`^/_fake/`),
}

// Spec is GitHub's API as published: its REST operations and its GraphQL schema.
type Spec struct {
	ops    map[string][]*operation // by method (upper case)
	schema *ast.Schema
	raw    rawDoc
}

// rawDoc is the REST description as JSON. A whole-document OpenAPI load of GitHub's
// 13 MB description takes tens of seconds, so each operation is loaded on its own, with
// only the components it refers to, the first time a request needs it.
type rawDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Info       json.RawMessage                       `json:"info"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components map[string]map[string]json.RawMessage `json:"components"`
}

type rawParam struct {
	Ref          string `json:"$ref"`
	Name         string `json:"name"`
	In           string `json:"in"`
	MultiSegment bool   `json:"x-multi-segment"` // its value may hold slashes (a file path, a ref)
}

type operation struct {
	method   string
	template string
	segs     []string        // the template's segments; "{name}" is a parameter
	query    map[string]bool // the query parameters it declares
	multi    map[string]bool // the path parameters that may span segments
	raw      json.RawMessage // the operation object

	once  sync.Once
	route *routers.Route
	err   error
}

var (
	loadOnce sync.Once
	loaded   *Spec
	loadErr  error
)

// Load returns GitHub's API descriptions, loaded once per process from cacheDir, where
// they are fetched to when missing (see the package comment).
func Load(cacheDir string) (*Spec, error) {
	loadOnce.Do(func() { loaded, loadErr = load(context.Background(), cacheDir) })
	return loaded, loadErr
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func load(ctx context.Context, cacheDir string) (*Spec, error) {
	rest, err := restDescription.read(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	gql, err := graphQLSchema.read(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	s := &Spec{ops: map[string][]*operation{}}
	var schemaErr error
	var parsed sync.WaitGroup
	parsed.Go(func() { s.schema, schemaErr = loadSchema(gql) })
	defer parsed.Wait()
	if err := json.Unmarshal(rest, &s.raw); err != nil {
		return nil, fmt.Errorf("decode GitHub's OpenAPI description: %w", err)
	}
	for template, item := range s.raw.Paths {
		var shared []rawParam
		if p, ok := item["parameters"]; ok {
			if err := json.Unmarshal(p, &shared); err != nil {
				return nil, fmt.Errorf("decode the parameters of %s: %w", template, err)
			}
		}
		for _, method := range methods {
			if item[method] == nil {
				continue
			}
			o, err := s.operation(template, method, item[method], shared)
			if err != nil {
				return nil, err
			}
			s.ops[o.method] = append(s.ops[o.method], o)
		}
	}
	parsed.Wait()
	if schemaErr != nil {
		return nil, schemaErr
	}
	return s, nil
}

// operation indexes one operation of the description.
func (s *Spec) operation(template, method string, raw json.RawMessage, shared []rawParam) (*operation, error) {
	var op struct {
		Parameters []rawParam `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", method, template, err)
	}
	o := &operation{method: strings.ToUpper(method), template: template, raw: raw,
		segs: strings.Split(strings.TrimPrefix(template, "/"), "/"), query: map[string]bool{}, multi: map[string]bool{}}
	for _, p := range slices.Concat(shared, op.Parameters) {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			if err := json.Unmarshal(s.raw.Components["parameters"][name], &p); err != nil {
				return nil, fmt.Errorf("decode parameter %s: %w", name, err)
			}
		}
		switch p.In {
		case openapi3.ParameterInQuery:
			o.query[p.Name] = true
		case openapi3.ParameterInPath:
			o.multi[p.Name] = p.MultiSegment
		}
	}
	return o, nil
}

// componentRef is a reference to a component of the description.
var componentRef = regexp.MustCompile(`"\$ref":\s*"#/components/([^/"]+)/([^/"]+)"`)

// load returns the operation as an OpenAPI route, made from a document holding only it
// and the components it refers to (transitively).
func (o *operation) load(s *Spec) (*routers.Route, error) {
	o.once.Do(func() {
		var op map[string]json.RawMessage
		if err := json.Unmarshal(o.raw, &op); err != nil {
			o.err = fmt.Errorf("decode %s %s: %w", o.method, o.template, err)
			return
		}
		delete(op, "responses") // requests are judged, not answers
		components := map[string]map[string]json.RawMessage{}
		queue := []json.RawMessage{}
		for _, v := range op {
			queue = append(queue, v)
		}
		for len(queue) > 0 {
			raw := queue[0]
			queue = queue[1:]
			for _, m := range componentRef.FindAllSubmatch(raw, -1) {
				kind, name := string(m[1]), string(m[2])
				if components[kind] == nil {
					components[kind] = map[string]json.RawMessage{}
				}
				if _, ok := components[kind][name]; !ok {
					c := s.raw.Components[kind][name]
					components[kind][name] = c
					queue = append(queue, c)
				}
			}
		}
		mini, err := json.Marshal(map[string]any{
			"openapi": s.raw.OpenAPI, "info": s.raw.Info, "components": components,
			"paths": map[string]any{o.template: map[string]any{strings.ToLower(o.method): op}},
		})
		if err != nil {
			o.err = fmt.Errorf("encode %s %s: %w", o.method, o.template, err)
			return
		}
		doc, err := openapi3.NewLoader().LoadFromData(mini)
		if err != nil {
			o.err = fmt.Errorf("load %s %s from GitHub's OpenAPI description: %w", o.method, o.template, err)
			return
		}
		item := doc.Paths.Value(o.template)
		o.route = &routers.Route{Spec: doc, Path: o.template, PathItem: item, Method: o.method, Operation: item.GetOperation(o.method)}
	})
	return o.route, o.err
}

// loadSchema parses and validates the GraphQL schema. GitHub's published schema declares
// some fields twice, identically (EnterpriseOwnerInfo.repositoryDeployKeySetting in
// 15.26.1), which a strict parser refuses: the repeats are dropped first.
func loadSchema(gql []byte) (*ast.Schema, error) {
	doc, err := parser.ParseSchemas(validator.Prelude, &ast.Source{Name: "schema.graphql", Input: string(gql)})
	if err != nil {
		return nil, fmt.Errorf("parse GitHub's GraphQL schema: %w", err)
	}
	for _, def := range doc.Definitions {
		seen := map[string]bool{}
		def.Fields = slices.DeleteFunc(def.Fields, func(f *ast.FieldDefinition) bool {
			dup := seen[f.Name]
			seen[f.Name] = true
			return dup
		})
	}
	schema, err := validator.ValidateSchemaDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("load GitHub's GraphQL schema: %w", err)
	}
	return schema, nil
}

// Operation returns the path template of the operation a request reaches (by its
// escaped path) and its path parameters; "" when GitHub has no such operation.
func (s *Spec) Operation(method, escapedPath string) (string, map[string]string) {
	o, params := s.match(method, escapedPath)
	if o == nil {
		return "", nil
	}
	return o.template, params
}

// match finds the operation for a request path (escaped) and its path parameters. A
// literal segment beats a parameter; a template's last parameter, when it may hold
// slashes (a file path, a ref), takes the rest of the path.
func (s *Spec) match(method, escapedPath string) (*operation, map[string]string) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	var best *operation
	var bestScore []int
	for _, o := range s.ops[method] {
		score, ok := o.score(segs)
		if ok && (best == nil || slices.Compare(score, bestScore) > 0) {
			best, bestScore = o, score
		}
	}
	if best == nil {
		return nil, nil
	}
	params := map[string]string{}
	last := len(best.segs) - 1
	for i, seg := range best.segs {
		if name, ok := paramName(seg); ok {
			v := segs[i]
			if i == last && best.multi[name] {
				v = strings.Join(segs[i:], "/")
			}
			params[name] = unescape(v)
		}
	}
	return best, params
}

// score rates how well the template fits the segments (nil, false: it does not): an
// exact length first, then literal segments as early as possible.
func (o *operation) score(segs []string) ([]int, bool) {
	exact := len(segs) == len(o.segs)
	if !exact {
		name, ok := paramName(o.segs[len(o.segs)-1])
		if !ok || !o.multi[name] || len(segs) < len(o.segs) {
			return nil, false
		}
	}
	score := make([]int, 0, len(o.segs)+1)
	score = append(score, boolInt(exact))
	for i, seg := range o.segs {
		if _, ok := paramName(seg); ok {
			score = append(score, 0)
			continue
		}
		if segs[i] != seg {
			return nil, false
		}
		score = append(score, 1)
	}
	return score, true
}

func paramName(seg string) (string, bool) {
	if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func unescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// Check returns why GitHub would refuse the request (nil: it would not): its status
// (404 for no such operation, 422 for parameters or a body that do not fit) and the
// reason. A request to an endpoint outside api.github.com (git, OAuth web flow, App
// manifest pages) is not judged. Check leaves r.Body readable.
func (s *Spec) Check(r *http.Request) (int, error) {
	path := r.URL.EscapedPath()
	for _, re := range exempt {
		if re.MatchString(path) {
			return 0, nil
		}
	}
	body, err := readBody(r)
	if err != nil {
		return http.StatusBadRequest, err
	}
	if r.Method == http.MethodPost && path == "/graphql" {
		if err := s.checkGraphQL(body); err != nil {
			return http.StatusUnprocessableEntity, err
		}
		return 0, nil
	}
	o, params := s.match(strings.ToUpper(r.Method), path)
	if o == nil {
		return http.StatusNotFound, ErrNoOperation
	}
	var unknown []string
	for k := range r.URL.Query() {
		if !o.query[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return http.StatusUnprocessableEntity, fmt.Errorf("%s %s declares no query parameter %s", r.Method, o.template, strings.Join(unknown, ", "))
	}
	route, err := o.load(s)
	if err != nil {
		return http.StatusInternalServerError, err
	}
	if string(bytes.TrimSpace(body)) == "null" {
		// GitHub reads a JSON null as no parameters (ghinstallation sends it for a
		// token of the whole installation); the body must still be optional.
		body = nil
	}
	clone := r.Clone(r.Context())
	clone.Body, clone.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	if len(body) > 0 && clone.Header.Get("Content-Type") == "" {
		clone.Header.Set("Content-Type", "application/json") // GitHub reads a body as JSON, typed or not
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    clone,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc, // the fake checks credentials itself
			SkipSettingDefaults:     true,
			MultiError:              true,
			SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()},
		},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return http.StatusUnprocessableEntity, fmt.Errorf("%s %s: %w", r.Method, o.template, err)
	}
	return 0, nil
}

// readBody reads the request's body and puts it back for whoever reads it next.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// checkGraphQL validates a GraphQL request (query, variables) against the schema.
func (s *Spec) checkGraphQL(body []byte) error {
	var in struct {
		Query         string         `json:"query"`
		Variables     map[string]any `json:"variables"`
		OperationName string         `json:"operationName"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("GraphQL request is not JSON: %w", err)
	}
	doc, errs := gqlparser.LoadQueryWithRules(s.schema, in.Query, rules.NewDefaultRules())
	if len(errs) > 0 {
		return fmt.Errorf("GraphQL document %q: %w", in.Query, errs)
	}
	op := doc.Operations.ForName(in.OperationName)
	if op == nil {
		return fmt.Errorf("GraphQL document %q has no operation %q", in.Query, in.OperationName)
	}
	if in.Variables == nil {
		in.Variables = map[string]any{}
	}
	if _, err := validator.VariableValues(s.schema, op, in.Variables); err != nil {
		return fmt.Errorf("GraphQL variables of %q: %w", in.Query, err)
	}
	return nil
}
