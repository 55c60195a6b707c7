package config

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Parse reads, validates and resolves a config file. getenv looks up the
// variables named by api_key_env and admin.token_env (os.LookupEnv in
// production, a map in tests). On any mistake it returns a nil Config and
// an ErrorList holding every mistake found, sorted by line.
func Parse(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	p := &parser{getenv: getenv}
	root, err := document(data)
	if err != nil {
		return nil, ErrorList{yamlError(err)}
	}
	if root == nil {
		return nil, ErrorList{{Line: 0, Msg: "the config file is empty"}}
	}
	if root.Kind != yaml.MappingNode {
		return nil, ErrorList{{Line: root.Line, Msg: "the config file must be a mapping of keys (listen, channels, models, ...), not " + describe(root)}}
	}
	f := p.file(root)
	c := p.resolve(f)
	if len(p.errs) > 0 {
		errs := p.errs.dedup()
		errs.sort()
		return nil, errs
	}
	return c, nil
}

// Load reads the file at path and parses it with os.LookupEnv. Mistakes in
// the file come back as an ErrorList (lines relative to that file); a
// failure to read it comes back as the *fs.PathError.
func Load(path string) (*Config, error) { return LoadEnv(path, os.LookupEnv) }

// LoadEnv is Load with the environment read through getenv (`hopgate
// tenants` needs only the store, not every channel's credential).
func LoadEnv(path string, getenv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data, getenv)
	if err != nil {
		return nil, err
	}
	// The SQLite file lives next to the config file unless the file says
	// otherwise: where the gateway was started from must not matter.
	if c.Store.Enabled && c.Store.Driver == StoreSQLite && !filepath.IsAbs(c.Store.Path) {
		c.Store.Path = filepath.Join(filepath.Dir(path), c.Store.Path)
	}
	if c.Billing.JournalDir == "" {
		c.Billing.JournalDir = DefaultJournalDir
	}
	if !filepath.IsAbs(c.Billing.JournalDir) {
		c.Billing.JournalDir = filepath.Join(filepath.Dir(path), c.Billing.JournalDir)
	}
	return c, nil
}

// document decodes the single YAML document of data and returns its root
// node, nil for an empty file. A second document is a mistake: it would
// otherwise be silently ignored.
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, err
	default:
		return nil, errors.New("yaml: line " + strconv.Itoa(extra.Line) + ": only one YAML document is allowed per config file")
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		root := deref(doc.Content[0])
		if root != nil && isNull(root) {
			return nil, nil
		}
		return root, nil
	}
	return &doc, nil
}
