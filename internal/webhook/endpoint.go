package webhook

import (
	"cmp"
	"slices"
)

// addEndpointLocked adds e to the endpoints of its store, which are kept
// in the order they were made (by created_at, created_ns, then id): the
// same in every replica and after a restart. hk.Mu must be held.
func (hk *Hooks) AddEndpointLocked(e *Endpoint) {
	hk.Endpoints[e.ID] = e
	list := hk.ByStore[e.StoreID]
	i, _ := slices.BinarySearchFunc(list, e, func(a, b *Endpoint) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.CreatedNS, b.CreatedNS), cmp.Compare(a.ID, b.ID))
	})
	hk.ByStore[e.StoreID] = slices.Insert(list, i, e)
}
