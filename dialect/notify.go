package dialect

// Notifier announces released locks to waiting processes, such as
// PostgreSQL with LISTEN/NOTIFY (see Catalogue.Notifier). Strategies on a
// dialect without one poll.
//
// A Notifier listens on behalf of every locker built on it: it keeps one
// listening connection while it has subscribers, reconnecting after
// failures, and stops it a short while after the last one leaves. The
// dialect's Close stops it for good and waits for it. A Notifier is safe for
// concurrent use.
type Notifier interface {
	// Subscribe tells s about announcements until the returned
	// Subscription is ended, starting the listening connection if none
	// runs. It does not wait for the connection: s is told Ready when
	// announcements are delivered. After the dialect is closed, the
	// subscription never listens.
	Subscribe(s Subscriber) Subscription
	// Announced counts the announcements received so far, of any name, and
	// the listening connections that became ready (before which releases
	// may have gone unannounced). A caller refused before it subscribed
	// compares two readings to learn whether a release may have gone by
	// that it could not be told of.
	Announced() uint64
}

// Subscriber receives a Notifier's announcements. Its methods are called
// one at a time, from the notifier's goroutine; they must return quickly
// and must not call the Notifier or the Subscription.
type Subscriber interface {
	// Ready reports that a new listening connection delivers announcements
	// from now on: releases before it may have gone unannounced. It is not
	// called for a connection that was ready before Subscribe.
	Ready()
	// Released reports that the lock name was released, or its expired
	// row reaped, while some process waited for it.
	Released(name string)
	// Lost reports that the listening connection failed, or could not be
	// made, with err: nothing is announced until the next Ready.
	Lost(err error)
}

// A Claimer is a Subscriber whose wake-ups are addressed: a Notifier tells
// the release of a name that a Claimer watches (see Subscription.Watch) to
// one Claimer at a time, rather than to all, as Claim, until one claims
// it: by rank (see Rank), then in the order in which they began to watch
// the name. A Claimer is
// told the releases of names it does not watch, and dialect.TicketWake
// announcements, by Released as any Subscriber is. A Claimer that claimed
// a release and could not use it (its waiter gave up, or was refused by a
// queue's rule) hands it on with Subscription.Pass, so that no other
// waiter is left asleep.
type Claimer interface {
	Subscriber
	// Claim reports a release of name and whether the Claimer took it
	// (it woke a waiter that will try to be granted name alone); false
	// passes it to the next Claimer watching name. It is called as the
	// Subscriber's methods are.
	Claim(name string) bool
	// Rank returns the place in a queue of the Claimer's first waiter
	// for name (a FIFO ticket's id): a release is offered to lower ranks
	// first. 0 means none, as for a lock granted to whoever asks: such
	// Claimers come after those with a rank. It is called as Claim is.
	Rank(name string) int64
}

// Subscription is a Subscriber's registration with a Notifier. It is safe
// for concurrent use.
type Subscription interface {
	// Listening reports whether announcements reach the subscriber now.
	Listening() bool
	// Unsubscribe ends the registration: once it returns, the subscriber
	// is told nothing more, and every name it watched is unwatched.
	// Calling it again does nothing.
	Unsubscribe()
	// Watch and Unwatch register a name's first waiter and the departure
	// of its last, for a notifier that announces only the releases of
	// names some process registered as waited for (MySQL's, where each
	// wake-up is addressed to a waiting process); on every notifier they
	// also line a name's Claimers up (see Claimer). While any subscription
	// watches a name, the notifier keeps it registered, and once a
	// registration is in place it announces the name once (Released, or
	// Claim), since a release just before reached nobody. Both return at once,
	// without a round trip to the database, and may be called while the
	// caller holds a lock that its Subscriber methods take.
	Watch(name string)
	Unwatch(name string)
	// Pass offers a release of name that the subscriber claimed (see
	// Claimer) to the Claimers that watch name after it, or to all that
	// watch it if the subscriber no longer does, until one claims it. It
	// works after Unsubscribe too, returns without a round trip to the
	// database, and must not be called from a Subscriber's methods.
	Pass(name string)
}
