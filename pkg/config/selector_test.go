package config

import "testing"

// TestLabelSelectorMatches: matchLabels and every operator as
// metav1.LabelSelector means them; {} selects every namespace, nil none.
func TestLabelSelectorMatches(t *testing.T) {
	labelled := map[string]string{"podwire.io/forwarding": "true", "team": "nf"}
	for _, tc := range []struct {
		name   string
		sel    *LabelSelector
		labels map[string]string
		want   bool
	}{
		{"nil selects none", nil, labelled, false},
		{"empty selects all", &LabelSelector{}, nil, true},
		{"matchLabels", &LabelSelector{MatchLabels: map[string]string{"team": "nf"}}, labelled, true},
		{"matchLabels other value", &LabelSelector{MatchLabels: map[string]string{"team": "edge"}}, labelled, false},
		{"matchLabels missing", &LabelSelector{MatchLabels: map[string]string{"tier": "x"}}, labelled, false},
		{"In", req("team", OpIn, "edge", "nf"), labelled, true},
		{"In missing key", req("tier", OpIn, "nf"), labelled, false},
		{"NotIn", req("team", OpNotIn, "edge"), labelled, true},
		{"NotIn hit", req("team", OpNotIn, "nf"), labelled, false},
		{"NotIn missing key", req("tier", OpNotIn, "nf"), labelled, true},
		{"Exists", req("team", OpExists), labelled, true},
		{"Exists missing", req("tier", OpExists), labelled, false},
		{"DoesNotExist", req("tier", OpDoesNotExist), labelled, true},
		{"DoesNotExist present", req("team", OpDoesNotExist), labelled, false},
		{"all must hold", &LabelSelector{MatchLabels: map[string]string{"team": "nf"},
			MatchExpressions: []LabelSelectorRequirement{{Key: "podwire.io/forwarding", Operator: OpDoesNotExist}}}, labelled, false},
	} {
		if got := tc.sel.Matches(tc.labels); got != tc.want {
			t.Errorf("%s: %s matches %v = %v, want %v", tc.name, tc.sel, tc.labels, got, tc.want)
		}
	}
}

// TestNamespaceAdmitted: a namespace is admitted by a name glob or by its
// labels; an unknown namespace by neither, whatever its labels.
func TestNamespaceAdmitted(t *testing.T) {
	sel := &LabelSelector{MatchLabels: map[string]string{"podwire.io/forwarding": "true"}}
	lab := map[string]string{"podwire.io/forwarding": "true"}
	for _, tc := range []struct {
		globs []string
		ns    Namespace
		want  bool
	}{
		{[]string{"nf-*"}, Namespace{Name: "nf-a"}, true},
		{nil, Namespace{Name: "nf-a"}, false},
		{nil, Namespace{Name: "nf-a", Labels: lab}, true},
		{[]string{"other"}, Namespace{Name: "x", Labels: map[string]string{"podwire.io/forwarding": "yes"}}, false},
		{[]string{"*"}, Namespace{Name: "", Labels: lab}, false},
	} {
		if got := NamespaceAdmitted(tc.globs, sel, tc.ns); got != tc.want {
			t.Errorf("NamespaceAdmitted(%q, %s, %+v) = %v, want %v", tc.globs, sel, tc.ns, got, tc.want)
		}
	}
}

func req(key, op string, values ...string) *LabelSelector {
	return &LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}
