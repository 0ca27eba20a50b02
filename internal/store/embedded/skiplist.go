package embedded

import (
	"math/bits"
	"math/rand/v2"

	"deeplink/internal/store"
)

// skiplist is a sorted set's members in score order (compareScored): a
// skip list (Pugh, 1990) of up to maxLevel levels, each node on the next
// level up with probability 1/4, and a link back on the lowest level for
// reverse ranges. Finding, adding and removing cost O(log n) expected.
type skiplist struct {
	head  skipNode // no member: its next are the first node of each level
	level int      // levels in use
}

type skipNode struct {
	x    store.Scored
	next []*skipNode
	prev *skipNode // on level 0; nil for the first node
}

const maxLevel = 24 // 4^24: far more members than a store holds

func newSkiplist() *skiplist {
	return &skiplist{head: skipNode{next: make([]*skipNode, maxLevel)}, level: 1}
}

// randomLevel is a new node's level: 1, and one more with probability 1/4
// each time.
func randomLevel() int {
	return min(maxLevel, 1+bits.TrailingZeros64(rand.Uint64()|1<<62)/2)
}

// path fills update with the last node before x on each level.
func (l *skiplist) path(x store.Scored, update *[maxLevel]*skipNode) {
	n := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for n.next[i] != nil && compareScored(n.next[i].x, x) < 0 {
			n = n.next[i]
		}
		update[i] = n
	}
}

// insert adds x, which is not in l.
func (l *skiplist) insert(x store.Scored) {
	var update [maxLevel]*skipNode
	l.path(x, &update)
	lv := randomLevel()
	for i := l.level; i < lv; i++ {
		update[i] = &l.head
	}
	l.level = max(l.level, lv)
	n := &skipNode{x: x, next: make([]*skipNode, lv)}
	for i := range lv {
		n.next[i] = update[i].next[i]
		update[i].next[i] = n
	}
	if update[0] != &l.head {
		n.prev = update[0]
	}
	if n.next[0] != nil {
		n.next[0].prev = n
	}
}

// remove takes x out of l, if it is there.
func (l *skiplist) remove(x store.Scored) {
	var update [maxLevel]*skipNode
	l.path(x, &update)
	n := update[0].next[0]
	if n == nil || n.x != x {
		return
	}
	for i := range len(n.next) {
		update[i].next[i] = n.next[i]
	}
	if n.next[0] != nil {
		n.next[0].prev = n.prev
	}
	for l.level > 1 && l.head.next[l.level-1] == nil {
		l.level--
	}
}

// first returns the lowest node, or nil.
func (l *skiplist) first() *skipNode { return l.head.next[0] }

// seek returns the first node of score at least score, or nil.
func (l *skiplist) seek(score int64) *skipNode {
	n := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for n.next[i] != nil && n.next[i].x.Score < score {
			n = n.next[i]
		}
	}
	return n.next[0]
}

// last returns the last node of score at most score, or nil.
func (l *skiplist) last(score int64) *skipNode {
	n := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for n.next[i] != nil && n.next[i].x.Score <= score {
			n = n.next[i]
		}
	}
	if n == &l.head {
		return nil
	}
	return n
}
