"""What a policy says: label scores and deny/allow terms to an action (`rules`), the terms
(`terms`), a policy's `[users]` and review tables (`user_rules`, `review_rules`), and which
policy decides each channel, kept in step with the policies topic (`channels`).

May import: the base, kafka/ and policy/ itself.
"""
