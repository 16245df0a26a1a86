package main

// sourceCheckStep verifies the source address of every ordinary pod's
// packets at the node (pkg/sourcecheck). Its per-pod state is set elements
// only (ruleset.Elements of the record), added and removed by the verbs;
// forwarding pods have none (their interfaces are not checked).
type sourceCheckStep struct{}

func (sourceCheckStep) name() string { return "sourcecheck" }

func (sourceCheckStep) plan(a *attachment) error {
	a.rec.SourceCheck = a.conf.SourceCheckEnabled() && !a.ann.Forwarding
	a.rec.AllowedSourcePrefixes = a.ann.AllowedSourcePrefixes
	return nil
}

// add: the elements are added by ADD in one batch with every step's.
func (sourceCheckStep) add(*attachment) error { return nil }

// del: the elements are removed by teardown from the record.
func (sourceCheckStep) del(*attachment) error { return nil }

// check: CHECK verifies the table and the elements for every owner.
func (sourceCheckStep) check(*attachment) error { return nil }
