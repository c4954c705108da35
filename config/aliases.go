package config

import (
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// MaxExpandedNodes bounds the values a config document may expand to
// through YAML aliases: a real config has a few hundred, but a 1 KB
// document of nested aliases (an "alias bomb") expands to billions.
const MaxExpandedNodes = 100000

// CheckAliases refuses a YAML document whose aliases expand it beyond
// MaxExpandedNodes values, or refer to a value that contains them. It
// measures the expansion without performing it (each node's expanded size
// is computed once), so it takes time linear in the document whatever the
// document expands to; call it before walking or decoding a document from
// an untrusted source.
func CheckAliases(data []byte) error {
	root, err := readDocument("", data)
	if err != nil || root == nil {
		return err
	}
	return checkAliases(root, true)
}

// checkAliases measures root's expansion. A cycle is an error when
// refuseCycles is set; otherwise it counts as one value (the walk that
// follows names it with its key path).
func checkAliases(root *yaml.Node, refuseCycles bool) error {
	sizes := make(map[*yaml.Node]int)
	active := make(map[*yaml.Node]bool)
	var size func(n *yaml.Node) (int, error)
	size = func(n *yaml.Node) (int, error) {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return 1, nil
			}
			n = n.Alias
		}
		if s, ok := sizes[n]; ok {
			return s, nil
		}
		if active[n] {
			if !refuseCycles {
				return 1, nil
			}
			return 0, &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("the value of anchor %q contains an alias to itself", n.Anchor)}
		}
		active[n] = true
		defer delete(active, n)
		total := 1
		for _, c := range n.Content {
			s, err := size(c)
			if err != nil {
				return 0, err
			}
			total += s
			if total > MaxExpandedNodes {
				return 0, &Error{Line: c.Line, Column: c.Column, Msg: fmt.Sprintf("the document expands to more than %d values through aliases; write the values out", MaxExpandedNodes)}
			}
		}
		sizes[n] = total
		return total, nil
	}
	_, err := size(root)
	return err
}
