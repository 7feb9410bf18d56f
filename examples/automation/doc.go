// Package automation is an example consumer service: a small rule engine
// over work-item events ("when a work item's state changes to done, set its
// priority to none"). It reads Plane's events as Plane's triggers write
// them: a state change is workitem.state.updated with the new state's id
// in data.state_id and the old one, as text, in
// previous_attributes.state_id; every other event is acked unread.
//
// It shows the strongest guarantee warren offers. The handler runs inside
// the Postgres transaction of the dedup store's transactional mode: the rule
// ledger, the work item's change, the follow-up event (written to the
// outbox through outbox.Publish) and the event's done-mark all commit
// together. A crash after the commit and before the ack redelivers the
// event, which then finds its done-mark and is acknowledged as a duplicate:
// the rule's effects happen exactly once.
//
// Follow-up events carry initiator SYSTEM.AUTOMATION. This service skips
// SYSTEM.* events, which is what keeps a rule from triggering itself in a
// loop; other consumers, such as the webhook example, deliver them like any
// other event.
package automation
