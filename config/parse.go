package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// An Option changes how Parse and Load resolve a document.
type Option func(*options)

type options struct {
	embedded EmbeddedDefaults
}

// WithEmbedded applies d when the run uses the embedded reference backend
// (trainer.kind embedded, no inference.endpoints): inference.model and
// trainer.base_model become d.Model and
// trainer.hyperparameters.learning_rate d.LearningRate, each only if the
// document does not set it (to any value, even the default).
func WithEmbedded(d EmbeddedDefaults) Option {
	return func(o *options) { o.embedded = d }
}

// Load reads the YAML (or JSON) file at path and parses it with Parse;
// errors carry the file name and line.
func Load(path string, opts ...Option) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return parse(path, data, opts)
}

// Parse decodes a YAML or JSON document over Default(); an empty document
// is the default run. A document that is valid JSON is read as JSON (with
// its escapes), otherwise as YAML; both are checked the same way. Unknown
// keys and values of the wrong type are *Error values naming the key path,
// line and column, and what is accepted. Stored configs are read with
// FromJSON instead.
//
// Parse does not call Validate: callers may override fields first.
func Parse(data []byte, opts ...Option) (Config, error) {
	return parse("", data, opts)
}

// Decode decodes the YAML document data into v, a pointer to a struct,
// with the checks Parse makes of a config, for the other files grpo reads:
// an unknown key or a value of the wrong type is an *Error naming the key
// path, line and column, and what is accepted. A field of type yaml.Node
// takes any value unchecked. An empty document leaves v as it is.
func Decode(data []byte, v any) error {
	doc, err := document("", data)
	if err != nil || doc == nil {
		return err
	}
	if err := checkAliases(doc, false); err != nil {
		return err
	}
	w := walker{set: make(map[string]bool), active: make(map[*yaml.Node]bool)}
	if err := w.walk(doc, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	if err := doc.Decode(v); err != nil {
		return yamlError("", err)
	}
	return nil
}

// Document returns the node tree of a config document as Parse reads it
// (JSON as JSON, anything else as YAML), unchecked, for callers that look
// at keys before parsing; nil for an empty document.
func Document(data []byte) (*yaml.Node, error) {
	return readDocument("", data)
}

func readDocument(file string, data []byte) (*yaml.Node, error) {
	doc, isJSON := jsonNode(data)
	if !isJSON {
		return document(file, data)
	}
	if doc.Kind == yaml.ScalarNode && doc.ShortTag() == "!!null" {
		return nil, nil
	}
	return doc, nil
}

func parse(file string, data []byte, opts []Option) (Config, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := Default()
	doc, err := readDocument(file, data)
	if err != nil {
		return Config{}, err
	}
	if doc != nil {
		if err := checkAliases(doc, false); err != nil {
			if e, ok := err.(*Error); ok {
				e.File = file
			}
			return Config{}, err
		}
	}
	w := walker{file: file, set: make(map[string]bool), active: make(map[*yaml.Node]bool)}
	if doc != nil {
		if err := w.walk(doc, reflect.TypeFor[Config](), ""); err != nil {
			return Config{}, err
		}
		// A mapping replaces the default map instead of merging into it.
		if w.set["inference.chat_template_kwargs"] {
			cfg.Inference.ChatTemplateKwargs = nil
		}
		// The walk refused unknown keys, so decoding the checked tree
		// is as strict as a KnownFields decoder.
		if err := doc.Decode(&cfg); err != nil {
			return Config{}, yamlError(file, err)
		}
	}
	cfg.normalize()
	cfg.applyEmbedded(o.embedded, w.set)
	if !w.set["validation.n"] {
		// Validating at another size than training selects the best
		// step on tables the run never trained at (DESIGN §10).
		cfg.Validation.N = cfg.TrainSizes()
	}
	if w.set["test"] && !w.set["test.n"] {
		// A test section asks for a test split: measured, like
		// validation, at the sizes the run trains at unless it lists
		// its own (test.n: [] asks for none).
		cfg.Test.N = cfg.TestSizes()
	}
	return cfg, nil
}

// normalize gives values written as [] or null, or left out, one form: all
// mean the same.
func (c *Config) normalize() {
	if c.Inference.Endpoints == nil {
		c.Inference.Endpoints = []Endpoint{}
	}
	if len(c.Inference.ChatTemplateKwargs) == 0 {
		c.Inference.ChatTemplateKwargs = nil
	}
	if len(c.Curriculum.Promote.Sizes) == 0 {
		c.Curriculum.Promote.Sizes = nil
	}
	if len(c.Test.N) == 0 {
		c.Test.N = nil
	}
}

// document returns the content of the only YAML document in data, or nil
// when data holds none or a null one.
func document(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		e := yamlError(file, err)
		if e.Line > 0 && tabIndented(data, e.Line) {
			e.Msg += " (YAML indents with spaces, not tabs)"
		}
		return nil, e
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(file, err)
		}
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, &Error{File: file, Line: line, Msg: "a second YAML document; a config file holds one"}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	n := doc.Content[0]
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, nil
	}
	return n, nil
}

// tabIndented reports whether line (1-based) of data starts with a tab.
func tabIndented(data []byte, line int) bool {
	lines := bytes.Split(data, []byte("\n"))
	return line <= len(lines) && bytes.HasPrefix(bytes.TrimLeft(lines[line-1], " "), []byte("\t"))
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns a yaml.v3 error into an *Error carrying file and line.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	var terr *yaml.TypeError
	if errors.As(err, &terr) && len(terr.Errors) > 0 {
		msg = terr.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	e := &Error{File: file, Msg: msg}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	return e
}

// walker checks a YAML node tree against the Config type before it is
// decoded, so that every error can name its key path, and records which
// keys the document sets.
type walker struct {
	file   string
	set    map[string]bool     // key paths given a non-null value
	active map[*yaml.Node]bool // nodes being walked, to catch an alias to itself
	visits int                 // nodes walked, bounded against alias bombs
}

// maxVisits bounds the nodes walked: a real config has a few hundred, but
// merge keys over aliases can make a small document exponentially large.
const maxVisits = 100000

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	nodeType        = reflect.TypeFor[yaml.Node]()
)

func (w *walker) errorf(n *yaml.Node, key, format string, args ...any) *Error {
	return &Error{File: w.file, Line: n.Line, Column: n.Column, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// walk checks n as a value of type t found at key path path.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if w.active[n] {
		return w.errorf(n, path, "the value of anchor %q contains an alias to itself", n.Anchor)
	}
	if w.visits++; w.visits > maxVisits {
		return w.errorf(n, path, "the document expands to more than %d values through aliases", maxVisits)
	}
	w.active[n] = true
	defer delete(w.active, n)
	if n.ShortTag() == "!!null" || t == nodeType {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return w.leaf(n, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return w.mapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return w.errorf(n, path, "expected %s, got %s", describe(t), got(n))
		}
		for i, item := range n.Content {
			if err := w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return w.leaf(n, t, path)
}

// mapping checks n as the struct type t.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) error {
	fields := yamlFields(t)
	if n.Kind != yaml.MappingNode {
		return w.errorf(n, path, "expected %s, got %s", describe(t), got(n))
	}
	seen := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			if err := w.merge(v, t, path); err != nil {
				return err
			}
			continue
		}
		key := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			return w.errorf(k, path, "a key must be a plain name; accepted: %s", names(fields))
		}
		f, ok := fields[k.Value]
		if !ok {
			msg := "unknown key; accepted: " + names(fields)
			if s := suggest(k.Value, fields); s != "" {
				msg = fmt.Sprintf("unknown key (did you mean %s?); accepted: %s", s, names(fields))
			}
			return w.errorf(k, key, "%s", msg)
		}
		if prev, ok := seen[k.Value]; ok {
			return w.errorf(k, key, "set twice (first at line %d)", prev.Line)
		}
		seen[k.Value] = k
		if err := w.walk(v, f.Type, key); err != nil {
			return err
		}
		if v.ShortTag() != "!!null" {
			w.set[key] = true
		}
	}
	return nil
}

// merge checks the value of a "<<" merge key: a mapping or a list of them.
func (w *walker) merge(v *yaml.Node, t reflect.Type, path string) error {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			if err := w.walk(m, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	return w.walk(v, t, path)
}

// leaf decodes n into a scratch value of type t to check it.
func (w *walker) leaf(n *yaml.Node, t reflect.Type, path string) error {
	// yaml.v3 truncates 2.5 to 2 for an integer field; refuse it instead.
	if isInt(t) && !reflect.PointerTo(t).Implements(unmarshalerType) && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" {
		if f, err := strconv.ParseFloat(n.Value, 64); err != nil || f != math.Trunc(f) {
			return w.errorf(n, path, "expected %s, got %s", describe(t), got(n))
		}
	}
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return w.enum(n, path)
	}
	var terr *yaml.TypeError
	if errors.As(err, &terr) {
		return w.errorf(n, path, "expected %s, got %s", describe(t), got(n))
	}
	return w.errorf(n, path, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
}

// yamlFields maps the YAML keys of struct type t to its fields, as yaml.v3
// names them.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField)
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

// names lists the keys of fields in declaration order.
func names(fields map[string]reflect.StructField) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fields[keys[i]].Index[0] < fields[keys[j]].Index[0] })
	return strings.Join(keys, ", ")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a value of type t looks like in YAML.
func describe(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return "a duration like 60s, 30m or 1h30m"
	}
	if isInt(t) {
		return "an integer"
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + plural(t.Elem())
	case reflect.Map:
		return "a mapping"
	case reflect.Struct:
		return "a mapping with keys " + names(yamlFields(t))
	}
	return t.String()
}

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func plural(t reflect.Type) string {
	if isInt(t) {
		return "integers"
	}
	switch t.Kind() {
	case reflect.String:
		return "strings"
	case reflect.Struct:
		return "mappings with keys " + names(yamlFields(t))
	}
	return describe(t)
}

// got describes the YAML value n for an error message.
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if v := []rune(n.Value); len(v) > 40 {
		return strconv.Quote(string(v[:40])) + "..."
	}
	return strconv.Quote(n.Value)
}

// suggest returns the accepted key closest to key when it is a likely typo.
func suggest(key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	return Nearest(key, names)
}

// Nearest returns the candidate closest to s when s is a likely typo of
// it (at most a third of its letters wrong), else "": the "did you mean"
// of config keys and values, and of the command line's flags.
func Nearest(s string, candidates []string) string {
	limit := max(1, len(s)/3)
	best, bestDist := "", limit+1
	for _, name := range candidates {
		if d := editDistance(s, name); d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
