package webhook

import (
	"cmp"
	"net/http"
	"slices"
	"time"
)

// enqueueLocked creates a pending delivery of ev to e, due now, and logs
// it. hk.Mu must be held.
func (hk *Hooks) EnqueueLocked(e *Endpoint, ev *Event) *Delivery {
	now := time.Now()
	d := &Delivery{
		ID: NewID("dlv_"), Seq: e.NextSeq, EndpointID: e.ID, EventID: ev.ID, Status: StatusPending,
		CreatedAt: now.Unix(), NextAt: now.UnixNano(), Ev: ev, Index: -1,
	}
	e.NextSeq++
	hk.referLocked(d)
	hk.Pending[e.StoreID] += LogCost(d)
	e.Log = append(e.Log, d)
	hk.trimLogLocked(e)
	hk.scheduleLocked(d)
	hk.TouchLocked(KindEndpoint, e.ID) // its NextSeq
	hk.TouchLocked(kindDelivery, d.ID)
	// Written with each delivery made (a set: once a change), so that a
	// replica taking the delivery in finds its event (feed.go).
	hk.TouchLocked(KindEvent, ev.ID)
	return d
}

// trimLogLocked drops the oldest finished deliveries beyond the retention:
// past delivery_log_size, or past budget.log in bytes. Pending ones stay
// whatever their age; so the log is trimmed when one is added or grows,
// and again when ones logged beyond the retention end. It costs O(1) when
// nothing can go (e.finished is 0, as on a dead endpoint) and otherwise
// O(the entries up to the last one dropped): usually the oldest entry is
// finished and goes by reslicing, not by copying the whole log. A
// follower of a shared state leaves trimming to the leader, whose
// deletions it takes in (share.go). hk.Mu must be held.
func (hk *Hooks) trimLogLocked(e *Endpoint) {
	if !hk.Leading {
		return
	}
	excess := min(len(e.Log)-hk.Cfg.Webhooks.DeliveryLogSize, e.Finished)
	if over := e.LogBytes - hk.Budget.Log; over > 0 {
		// The oldest finished ones that take it back under the budget.
		n := 0
		for _, d := range e.Log {
			if over <= 0 || n == e.Finished {
				break
			}
			if d.Status != StatusPending {
				n++
				over -= LogCost(d)
			}
		}
		excess = max(excess, n)
	}
	if excess <= 0 {
		return
	}
	// e.log[:j] holds the excess oldest finished ones and the pending ones
	// among them; the pending ones move up to just below e.log[j], in order.
	j := 0
	for n := 0; n < excess; j++ {
		if e.Log[j].Status != StatusPending {
			n++
		}
	}
	w := j
	for i := j - 1; i >= 0; i-- {
		d := e.Log[i]
		if d.Status != StatusPending {
			e.LogBytes -= LogCost(d)
			hk.forgetLocked(d)
			continue
		}
		w--
		e.Log[w] = d
	}
	clear(e.Log[:w])
	e.Log = e.Log[w:]
	e.Finished -= excess
}

// finishedLocked marks the pending d, logged on e, as status. hk.Mu must
// be held.
func (e *Endpoint) finishedLocked(d *Delivery, status string) {
	d.Status, d.NextAt = status, 0
	e.Finished++
}

// endLocked ends d, of e, with status (statusSucceeded or statusFailed;
// a failure says why), and counts it: every way a delivery ends goes
// through here, so that /metrics agrees with the delivery logs. hk.Mu
// must be held.
func (hk *Hooks) EndLocked(e *Endpoint, d *Delivery, status, reason string) {
	hk.TouchLocked(kindDelivery, d.ID)
	hk.Pending[e.StoreID] -= LogCost(d)
	e.finishedLocked(d, status)
	e.LogBytes += LogCost(d)
	d.Reason = reason
	if status == StatusSucceeded {
		hk.Ended.Succeeded.Add(1)
	} else {
		hk.Ended.Failed.Add(1)
	}
}

// referLocked adds d to the indexes, and its event if d is the first
// delivery to refer to it. hk.Mu must be held.
func (hk *Hooks) referLocked(d *Delivery) {
	hk.Deliv[d.ID] = d
	if d.Ev.Refs == 0 {
		hk.Events[d.Ev.ID] = d.Ev
		hk.TouchLocked(KindEvent, d.Ev.ID)
	}
	d.Ev.Refs++
}

// forgetLocked removes d from the indexes, and its event once no delivery
// refers to it: O(1), by the event's reference count. hk.Mu must be held.
func (hk *Hooks) forgetLocked(d *Delivery) {
	delete(hk.Deliv, d.ID)
	hk.TouchLocked(kindDelivery, d.ID)
	if d.Ev.Refs--; d.Ev.Refs == 0 {
		delete(hk.Events, d.Ev.ID)
		hk.TouchLocked(KindEvent, d.Ev.ID)
	}
}

// removeEndpointLocked deletes e, its log and its pending deliveries.
func (hk *Hooks) RemoveEndpointLocked(e *Endpoint) {
	for _, d := range e.Log {
		if d.Index >= 0 {
			hk.Sched.Remove(d)
		}
		if d.Status == StatusPending {
			hk.Pending[e.StoreID] -= LogCost(d)
		}
		d.Status = StatusFailed
		hk.forgetLocked(d)
	}
	hk.Ready = slices.DeleteFunc(hk.Ready, func(d *Delivery) bool { return d.EndpointID == e.ID })
	e.Waiting = nil
	if e.cancelAttempts != nil {
		e.cancelAttempts()
	}
	delete(hk.Endpoints, e.ID)
	hk.ByStore[e.StoreID] = slices.DeleteFunc(hk.ByStore[e.StoreID], func(o *Endpoint) bool { return o == e })
	hk.TouchLocked(KindEndpoint, e.ID)
}

// event is the event d sends: in its record (Event), or in the working
// copy (Ev).
func (d *Delivery) event() *Event {
	if d.Event != nil {
		return d.Event
	}
	return d.Ev
}

// summary is a delivery as the log lists it.
func (d *Delivery) Summary() map[string]any {
	m := map[string]any{
		"id": d.ID, "endpoint_id": d.EndpointID, "event_id": d.EventID, "event_type": d.event().Type,
		"status": d.Status, "created_at": d.CreatedAt, "attempt_count": len(d.Attempts),
	}
	if d.Status == StatusPending {
		m["next_attempt_at"] = time.Unix(0, d.NextAt).Unix()
	}
	if d.Reason != "" {
		m["failure_reason"] = d.Reason
	}
	if n := len(d.Attempts); n > 0 {
		a := d.Attempts[n-1]
		m["last_attempt_at"] = time.Unix(0, a.At).Unix()
		m["last_response_status"] = a.Status
	}
	return m
}

// detail is a delivery with every attempt as docs/api.md shows it.
func (d *Delivery) Detail(e *Endpoint) map[string]any {
	m := d.Summary()
	m["url"] = e.URL
	atts := []map[string]any{}
	for _, a := range d.Attempts {
		x := map[string]any{
			"at":              time.Unix(0, a.At).UTC().Format(time.RFC3339Nano),
			"url":             cmp.Or(a.URL, e.URL),
			"request_headers": flatHeader(DeliveryHeader(a.signatures(d.event().ID))),
			"request_body":    string(d.event().Body),
			"response_status": a.Status,
			"response_body":   a.ResponseBody,
			"duration_ms":     a.DurationMS,
		}
		if a.Error != "" {
			x["error"] = a.Error
		}
		atts = append(atts, x)
	}
	m["attempts"] = atts
	m["request_body"] = string(d.event().Body)
	return m
}

// flatHeader is h with one value per name, as the delivery log shows it.
func flatHeader(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[k] = v[0]
	}
	return m
}
