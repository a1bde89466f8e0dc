package drift

import (
	"sort"

	"github.com/sandprobe/sandprobe/report"
)

// A site is where in its object a finding was made, as a place in the
// order a report lists the object's findings: by zone, then by container
// or volume, then by field. The rules of an object run in catalogue order;
// their findings are then sorted by site (stably: one rule's findings at
// one site keep the order it found them in), so a report reads a pod from
// top to bottom whatever order the rules ran in.
type site uint64

// A zone is a part of an object.
type zone uint8

// Zones of a pod, in report order.
const (
	zonePlacement zone = iota // its labels, runtime class and token
	zoneContainer             // each container in turn (init and ephemeral ones last)
	zonePod                   // its securityContext, annotations and host namespaces
	zoneVolume                // each volume in turn
	zoneStandard              // the Pod Security Standard
)

// A field is what a rule reads within a zone.
type field uint8

// Pod fields, in report order within their zone. The securityContext
// fields are one list for a container and for the pod (each zone uses the
// ones it has).
const (
	// zonePlacement
	fLabels field = iota
	fRuntimeClass
	fAutomountToken
	fProjectedToken
	// zoneContainer and zonePod: the securityContext
	fRunAsNonRoot
	fRunAsUser
	fRunAsGroup
	fSeccomp
	fAllowPrivilegeEscalation
	fReadOnlyRoot
	fCapDrop
	fCapAdd
	fPrivileged
	fProcMount
	fFSGroup
	fSupplementalGroups
	fSysctls
	fSELinux
	fAppArmor
	// zoneContainer: the rest of a container
	fPorts
	fImage
	fResources
	fEnv
	// zonePod: the rest of the pod
	fAnnotations
	fHostNetwork
	fHostPID
	fHostIPC
	// zoneVolume
	fVolume
	// zoneStandard
	fStandard
)

// zoneOfPodField is the zone of a pod-level field.
func zoneOfPodField(f field) zone {
	switch {
	case f <= fProjectedToken:
		return zonePlacement
	case f == fVolume:
		return zoneVolume
	case f == fStandard:
		return zoneStandard
	}
	return zonePod
}

func siteOf(z zone, index int, f field) site {
	return site(z)<<48 | site(uint32(index))<<8 | site(f)
}

// place is where a finding is: its site and the YAML path (or flag, or
// field of docker inspect) that decides it, the finding's subject.
type place struct {
	site site
	path string
}

// sortBySite puts an object's findings in site order; at[i] is the site of
// fs[i]. Most objects have a few findings, mostly in order already: an
// insertion sort, stable and allocation-free, unless there are many.
func sortBySite(fs []report.Finding, at []site) {
	if len(at) > 64 {
		sort.Stable(bySite{fs, at})
		return
	}
	for i := 1; i < len(at); i++ {
		for j := i; j > 0 && at[j] < at[j-1]; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
			at[j], at[j-1] = at[j-1], at[j]
		}
	}
}

type bySite struct {
	fs []report.Finding
	at []site
}

func (b bySite) Len() int           { return len(b.at) }
func (b bySite) Less(i, j int) bool { return b.at[i] < b.at[j] }
func (b bySite) Swap(i, j int) {
	b.fs[i], b.fs[j] = b.fs[j], b.fs[i]
	b.at[i], b.at[j] = b.at[j], b.at[i]
}
