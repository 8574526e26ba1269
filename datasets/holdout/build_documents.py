"""Writes the three binary documents of the holdout set, service-level-agreement.pdf (fpdf2),
support-faq.docx (python-docx) and pricing.xlsx (openpyxl), from the text below.

The output is deterministic: fixed metadata dates in all three, fixed zip entry times in the
docx and the xlsx, so a rebuild gives the same bytes as the committed files. Run from the
repository root:

    .venv/bin/python datasets/holdout/build_documents.py
"""

import io
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import openpyxl
from openpyxl.styles import Font
from openpyxl.writer.excel import ExcelWriter

sys.path.insert(0, str(Path(__file__).parents[1]))
from office_files import faq_docx, fixed_zip_times, titled_pdf

DOCUMENTS = Path(__file__).parent / "documents"
WRITTEN = datetime(2025, 3, 10, 9, 0, 0, tzinfo=UTC)
COMPANY = "Brindlecote Software Ltd"

# The service level agreement. The PDF core fonts are Latin-1: no dashes or euro signs here.
SLA_TITLE = "Brindlecote Conductor Service Level Agreement"
SLA_SECTIONS = [
    (
        None,
        [
            "Version 2025.1, effective 1 January 2025. This agreement replaces the service level "
            "agreement dated 1 April 2023. It forms part of the subscription agreement between "
            'Brindlecote Software Ltd ("Brindlecote", "we") and the customer.',
        ],
    ),
    (
        "1. Scope",
        [
            "This agreement covers the hosted Brindlecote Conductor service in the eu-west and "
            "us-east regions for customers on the Team, Business and Enterprise plans. The "
            "Starter plan is provided without an uptime commitment and is not eligible for "
            "service credits.",
            "Features labelled Preview, the sandbox environment and self-hosted runners "
            "are not covered by this agreement.",
        ],
    ),
    (
        "2. Definitions",
        [
            "Downtime: a minute in which the Conductor API or the scheduler in a region does not "
            "accept requests or does not start runs that are due. We measure it with external "
            "probes that test each region every 60 seconds from three locations. A minute counts "
            "as Downtime when at least two of the three probes fail.",
            "Monthly Uptime Percentage: the number of minutes in the calendar month minus the "
            "minutes of Downtime, divided by the number of minutes in the month. It is measured "
            "for each region separately.",
            "Monthly Fee: the fee the customer pays for the affected plan for the month, without "
            "add-ons and taxes.",
        ],
    ),
    (
        "3. Uptime commitment",
        [
            "Brindlecote commits to the following Monthly Uptime Percentage in each region: "
            "99.5% on the Team plan, 99.9% on the Business plan and 99.95% on the Enterprise "
            "plan. For a 30-day month, 99.9% allows about 43 minutes of Downtime.",
        ],
    ),
    (
        "4. Service credits",
        [
            "If the Monthly Uptime Percentage in a region falls below the commitment for the "
            "customer's plan, the customer can claim a service credit. The credit is a "
            "percentage of the Monthly Fee, as shown in the table below.",
            None,
            "The credits for one month never add up to more than 50% of the Monthly Fee. Service "
            "credits are the customer's only remedy for Downtime.",
        ],
    ),
    (
        "5. Exclusions",
        [
            "The following do not count as Downtime:",
            "(a) scheduled maintenance that we announce on status.brindlecote.io at least 5 "
            "business days ahead, up to 8 hours in a calendar month. Scheduled maintenance "
            "beyond 8 hours in a month counts as Downtime;",
            "(b) problems caused by the customer's pipeline code, by runners the customer "
            "hosts, or by the customer's own systems and the third-party services its pipelines "
            "connect to;",
            "(c) requests rejected because the customer went over the API rate limits of its plan;",
            "(d) suspension of the workspace for non-payment or for a breach of the acceptable "
            "use policy;",
            "(e) events beyond our reasonable control, such as a failure of the internet outside "
            "our hosting providers' networks.",
            "Emergency maintenance announced less than 5 business days ahead is not excluded: "
            "it counts as Downtime.",
        ],
    ),
    (
        "6. How to claim a credit",
        [
            "Open a ticket in the support portal at app.brindlecote.io/support with the category "
            "SLA claim. Give the region, the dates and times of the Downtime, and the pipelines "
            "that were affected. Only the workspace Owner or a Billing Admin can make a claim.",
            "Claims must reach us within 30 days after the end of the month in which the "
            "Downtime happened. Claims that arrive later are not accepted.",
            "We answer every claim within 15 business days. An approved credit is deducted from "
            "the customer's next invoice. Credits are not paid out in cash. The only exception is "
            "the end of the subscription: credits that could not be used are then refunded to "
            "the original payment method within 45 days.",
        ],
    ),
    (
        "7. Repeated failures",
        [
            "If the Monthly Uptime Percentage of a region is below 99.0% in three months in a "
            "row, an Enterprise customer may end its subscription without paying a termination "
            "fee. The customer must give written notice within 60 days after the third month.",
            "Questions about this agreement: legal@brindlecote.io.",
        ],
    ),
]
CREDIT_HEADER = ("Monthly Uptime Percentage", "Team", "Business", "Enterprise")
CREDIT_ROWS = [
    ("Below the commitment, but at least 99.0%", "5%", "10%", "15%"),
    ("Below 99.0%, but at least 95.0%", "10%", "25%", "30%"),
    ("Below 95.0%", "25%", "50%", "50%"),
]

FAQ_TITLE = "Brindlecote Conductor Support FAQ"
FAQ_INTRO = (
    "Answers to the questions our support team hears most often about billing, refunds, your "
    "data and how to reach us. Prices and plan limits are on the pricing page. If your "
    "question is not answered here, contact support through the channels for your plan."
)
# (heading, [(question, answer), ...]); a None question marks the support table's place.
FAQ_SECTIONS = [
    (
        "Billing",
        [
            (
                "How and when am I invoiced?",
                "Monthly plans are charged on the same day of each month as the day you "
                "subscribed. Annual plans are charged in full at the start of the year. Prices "
                "are in pounds sterling (GBP) and do not include VAT. Invoices are emailed to the "
                "billing contact and can be downloaded under Settings > Billing.",
            ),
            (
                "Which payment methods do you accept?",
                "Card payments with Visa, Mastercard or American Express are accepted on every "
                "plan. Bank transfer is possible only for annual Business and Enterprise "
                "subscriptions. We do not accept PayPal or cheques.",
            ),
            (
                "What happens if a payment fails?",
                "We try the payment again three times over 10 days and email the workspace Owner "
                "each time. If the invoice is still unpaid 14 days after its due date, the "
                "workspace becomes read-only: schedules are paused and no new runs start. After "
                "30 days without payment the workspace is suspended.",
            ),
            (
                "What if we use more pipeline runs than our plan includes?",
                "On the Starter plan, no new runs start once the monthly allowance is used up; "
                "they start again at the beginning of the next billing month. On the Team, "
                "Business and Enterprise plans your runs keep going, and the extra runs are "
                "billed at £4 per 1,000 runs at the end of the month. Run packs bought in advance "
                "cost less.",
            ),
        ],
    ),
    (
        "Trials, plan changes and refunds",
        [
            (
                "Is there a free trial?",
                "Yes. The trial lasts 14 days and includes the features of the Business plan. No "
                "card is needed. A trial workspace can start at most 1,000 runs. Trial workspaces "
                "that are not moved to a paid plan are deleted 60 days after the trial ends.",
            ),
            (
                "Can I change my plan?",
                "Upgrades take effect at once, and you pay the difference for the rest of the "
                "billing period. Downgrades take effect at the start of the next billing period.",
            ),
            (
                "Can I get a refund?",
                "Monthly subscriptions are not refunded, not even for part of a month. An annual "
                "subscription cancelled within 60 days of its start is refunded pro rata for the "
                "unused months. After 60 days annual subscriptions are not refunded, but you keep "
                "access until the end of the paid year. Service credits for downtime are covered "
                "by the SLA, not by this policy.",
            ),
            (
                "How do I cancel my subscription?",
                "Only the workspace Owner can cancel, under Settings > Billing > Cancel "
                "subscription. The cancellation takes effect at the end of the current billing "
                "period, and the workspace stays usable until then.",
            ),
        ],
    ),
    (
        "Your data",
        [
            (
                "How long do you keep run logs?",
                "Run logs are kept for the maximum retention of your plan, shown on the pricing "
                "page, and are then deleted. Run metadata (start and end time, status and who "
                "started the run) is kept for 13 months on every plan.",
            ),
            (
                "Where is my data stored?",
                "In the region you choose when you create the workspace: eu-west (Dublin, "
                "Ireland) or us-east (Virginia, USA). Customers cannot move a workspace to "
                "another region themselves. Enterprise customers can ask us to migrate a "
                "workspace once a year.",
            ),
            (
                "What happens to our data after we cancel?",
                "After the subscription ends, the workspace stays available read-only for 30 "
                "days so that you can export pipelines and logs. Then all data is deleted, and "
                "backups that contain it are overwritten within a further 35 days.",
            ),
            (
                "How do I delete our workspace and all its data?",
                "The workspace Owner can delete it under Settings > Workspace > Delete "
                "workspace. For 7 days after the request the Owner can still restore the "
                "workspace; after that the deletion cannot be undone, and we send a confirmation "
                "email when it is complete. Any user can delete their own user account under "
                "Profile > Delete account, unless they are the workspace's last Owner.",
            ),
        ],
    ),
    (
        "Getting support",
        [
            (
                "How do I reach support, and when?",
                "Support channels, hours and response targets depend on your plan's support "
                "level. Hours are UK time; response targets count from when the ticket is opened.",
            ),
            (None, ""),
            (
                "Can Starter customers email support?",
                "No. On the Starter plan, help is given through the community forum, where our "
                "support team answers questions. The one exception is billing: Starter customers "
                "can send billing questions to billing@brindlecote.io.",
            ),
            (
                "Is there phone support?",
                "Phone support is included in the Business and Enterprise plans. The number to "
                "call is shown in the app under Help > Call us after you sign in.",
            ),
            (
                "Is support open on bank holidays?",
                "Support is closed on bank holidays in England, and the Lisbon team is also off "
                "on Portuguese public holidays. Premium support for Enterprise customers answers "
                "urgent issues on every day of the year.",
            ),
            (
                "In which languages do you offer support?",
                "In English, and in Portuguese during the opening hours of our Lisbon office, "
                "09:00 to 18:00 Lisbon time on working days.",
            ),
        ],
    ),
]
SUPPORT_HEADER = ("Support level", "Plan", "Channels", "Hours", "First response target")
SUPPORT_ROWS = [
    ("Community", "Starter", "Community forum", "Monday to Friday, 09:00-17:30", "3 business days"),
    ("Standard", "Team", "Email, in-app chat", "Monday to Friday, 08:00-18:00", "1 business day"),
    (
        "Priority",
        "Business",
        "Email, in-app chat, phone",
        "Monday to Friday, 07:00-20:00",
        "4 business hours",
    ),
    (
        "Premium",
        "Enterprise",
        "Email, in-app chat, phone, shared Slack channel",
        "24 hours a day, 7 days a week",
        "1 hour for urgent issues, 4 hours for others",
    ),
]

# The pricing workbook: plain numbers (General format), so every cell reads as it is shown.
PLANS_HEADER = (
    "Plan",
    "Monthly price (GBP)",
    "Annual price (GBP)",
    "Pipeline runs included per month",
    "Seats included",
    "Support level",
    "Max log retention (days)",
)
PLANS_ROWS = [
    ("Starter", 29, 290, 2000, 3, "Community", 7),
    ("Team", 149, 1490, 25000, 10, "Standard", 30),
    ("Business", 499, 4990, 150000, 25, "Priority", 90),
    ("Enterprise", 1800, 18000, 1000000, "Unlimited", "Premium", 365),
]
ADDONS_HEADER = ("Add-on", "Price (GBP per month)", "Available on", "Notes")
ADDONS_ROWS = [
    ("Extra seat", 12, "Team, Business", "Enterprise includes unlimited seats"),
    (
        "Run pack (10,000 extra pipeline runs)",
        35,
        "Team, Business, Enterprise",
        "Unused runs expire at the end of the month",
    ),
    (
        "Extended log retention (365 extra days)",
        90,
        "Business, Enterprise",
        "Added to the plan's max log retention",
    ),
    (
        "Dedicated runner (4 vCPU, 16 GB memory)",
        240,
        "Business, Enterprise",
        "Runs in the workspace's region",
    ),
    ("Single sign-on (SAML)", 60, "Team", "Included in Business and Enterprise"),
    ("Audit log export", 45, "Business", "Included in Enterprise"),
]
NOTES_HEADER = ("No.", "Note")
NOTES_ROWS = [
    (1, "Prices are valid from 1 January 2025 until further notice and are shown without VAT."),
    (
        2,
        "Annual prices are paid in advance for twelve months and cost the same as ten monthly "
        "payments.",
    ),
    (
        3,
        "Included pipeline runs reset on the first day of each billing month; unused runs do not "
        "carry over to the next month.",
    ),
    (
        4,
        "A run counts towards the allowance when its first step starts. Runs cancelled before "
        "their first step starts are not counted, and retrying a failed step does not count as "
        "a new run.",
    ),
    (
        5,
        "Seats are named users with the Admin or Member role. Viewers are free and unlimited on "
        "every plan.",
    ),
    (6, "Max log retention is the number of days run logs are kept before they are deleted."),
    (
        7,
        "Add-ons are billed monthly, also on annual plans, and can be cancelled at the end of "
        "any month.",
    ),
    (
        8,
        "The Starter plan is limited to one workspace per company and cannot be combined with "
        "add-ons.",
    ),
    (
        9,
        "Accredited universities and colleges receive a 50% discount on the Team plan for "
        "teaching and research use. Ask sales for the application form.",
    ),
    (
        10,
        "Enterprise prices are list prices. Customers with more than 1,000,000 runs a month "
        "should contact sales for a quote.",
    ),
]


def build_pdf(path: Path) -> None:
    pdf = titled_pdf(SLA_TITLE, COMPANY, WRITTEN)
    for heading, paragraphs in SLA_SECTIONS:
        if heading:
            pdf.set_font("Helvetica", "B", 12)
            pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        for paragraph in paragraphs:
            if paragraph is None:
                with pdf.table(col_widths=(80, 30, 30, 30), text_align="LEFT") as table:
                    for row in (CREDIT_HEADER, *CREDIT_ROWS):
                        cells = table.row()
                        for text in row:
                            cells.cell(text)
                pdf.ln(3)
                continue
            pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
    pdf.output(str(path))


def build_docx(path: Path) -> None:
    faq_docx(
        path,
        FAQ_TITLE,
        f"{COMPANY}, Customer Support",
        FAQ_INTRO,
        FAQ_SECTIONS,
        (SUPPORT_HEADER, SUPPORT_ROWS),
        WRITTEN,
    )


def build_xlsx(path: Path) -> None:
    workbook = openpyxl.Workbook()
    properties = workbook.properties
    properties.title = "Brindlecote Conductor pricing"
    properties.creator = properties.lastModifiedBy = f"{COMPANY}, Sales"
    properties.created = properties.modified = WRITTEN.replace(tzinfo=None)
    plans = workbook.active
    plans.title = "Plans"
    _fill_sheet(plans, PLANS_HEADER, PLANS_ROWS, (14, 20, 19, 32, 15, 15, 24))
    addons = workbook.create_sheet("Add-ons")
    _fill_sheet(addons, ADDONS_HEADER, ADDONS_ROWS, (40, 22, 28, 42))
    notes = workbook.create_sheet("Notes")
    _fill_sheet(notes, NOTES_HEADER, NOTES_ROWS, (6, 110))
    # ExcelWriter rather than Workbook.save, which stamps the current time as modified.
    saved = io.BytesIO()
    with zipfile.ZipFile(saved, "w", zipfile.ZIP_DEFLATED) as archive:
        ExcelWriter(workbook, archive).save()
    path.write_bytes(fixed_zip_times(saved.getvalue(), WRITTEN))


def _fill_sheet(sheet, header, rows, widths) -> None:
    sheet.append(header)
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    for row in rows:
        sheet.append(row)
    for column, width in zip("ABCDEFG", widths, strict=False):
        sheet.column_dimensions[column].width = width
    sheet.freeze_panes = "A2"


def main() -> None:
    DOCUMENTS.mkdir(parents=True, exist_ok=True)
    build_pdf(DOCUMENTS / "service-level-agreement.pdf")
    build_docx(DOCUMENTS / "support-faq.docx")
    build_xlsx(DOCUMENTS / "pricing.xlsx")


if __name__ == "__main__":
    main()
