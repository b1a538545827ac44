"""A candidate model beside the primary: the shadow scores the messages the primary decided, on
threads and a bounded queue of its own, under the same channel policies, and says where the two
disagree (metrics, the shadow topic); it never decides a message, delays a decision or holds up a
commit.

May import: the base, kafka/, policy/, decide/ and shadow/ itself.
"""
