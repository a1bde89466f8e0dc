package result

// Location is where a probe stood when it made a finding, as the backend
// that placed it knows it: typed, so that no reader parses a target back.
// The Kubernetes backend fills it; other backends' places (the local
// sandbox, an image) have no namespace or node, and their findings' Target
// alone names them. Reports show Location.String() as the finding's target.
type Location struct {
	// Namespace is the sandbox namespace the probe pod stood in.
	Namespace string
	// Node is the node it ran on; "" before it got one.
	Node string
	// Stray names the pod without the sandbox labels the probe stood in for.
	Stray string
	// Control marks the run's control vantage.
	Control bool
}

// String is the location as a target: "namespace/NS", then "/node/NODE"
// once placed, then "/as/POD" for a stand-in or "/control" for the
// control vantage. Metric series and report targets keep this form, which
// stays the same run after run (pod names do not).
func (l Location) String() string {
	t := "namespace/" + l.Namespace
	if l.Node != "" {
		t += "/node/" + l.Node
	}
	switch {
	case l.Stray != "":
		t += "/as/" + l.Stray
	case l.Control:
		t += "/control"
	}
	return t
}

// Placed reports whether the location is a sandbox namespace's (a kube
// probe location, not the control vantage's and not another backend's).
func (l Location) Placed() bool { return l.Namespace != "" && !l.Control }

// OnPoolNode reports whether the location is one probe of the sandbox pool
// on a node: not a stand-in for unlabelled pods, not the control vantage.
func (l Location) OnPoolNode() bool { return l.Node != "" && l.Stray == "" && !l.Control }
