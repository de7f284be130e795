-- Pull mode (WHILLY_GITHUB_DELIVERIES=pull): whilly polls the App's delivery log instead
-- of receiving POST /webhook. One row per App: how far the log has been taken (the
-- delivered_at of the newest delivery taken), and a lease on the database clock so that
-- one replica polls at a time. Deliveries themselves go to webhook_deliveries, keyed by
-- their GUID, exactly as pushed ones do.
CREATE TABLE github_delivery_cursor (
    app_id       bigint      PRIMARY KEY CHECK (app_id > 0),
    delivered_at timestamptz,
    lease_token  uuid,
    leased_until timestamptz NOT NULL DEFAULT '-infinity',
    polled_at    timestamptz
);
