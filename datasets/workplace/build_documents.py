"""Writes the two binary documents of the workplace dev set, travel-expenses-faq.docx
(python-docx) and quarterly-support-report.pdf (fpdf2), from the text below.

The output is deterministic: fixed metadata dates in both, fixed zip entry times in the docx,
so a rebuild gives the same bytes as the committed files. Run from the repository root:

    .venv/bin/python datasets/workplace/build_documents.py
"""

import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from office_files import faq_docx, titled_pdf

DOCUMENTS = Path(__file__).parent / "documents"
WRITTEN = datetime(2024, 10, 1, 9, 0, 0, tzinfo=UTC)

FAQ_TITLE = "Travel and Expenses FAQ"
FAQ_INTRO = (
    "This FAQ explains how business travel is booked and how travel costs are reimbursed at "
    "Skarvik Instruments AS. It applies to employees in Norway and Estonia. The full rules are "
    "in the travel policy; when the FAQ and the policy differ, the policy applies. Questions "
    "go to the finance team at travel@skarvik.no."
)
# (heading, [(question, answer), ...]); a None question marks the per-diem table's place.
FAQ_SECTIONS = [
    (
        "Booking travel",
        [
            (
                "How do I book flights and hotels?",
                "All flights, trains and hotels are booked through the Berg Reiser travel portal, "
                "which you reach from the intranet. Trips booked elsewhere are reimbursed only if "
                "you can show that the price was lower than the portal's price on the same day.",
            ),
            (
                "Which class may I fly?",
                "Economy class for flights shorter than 6 hours. For flights of 6 hours or more "
                "you may book premium economy. Business class is never booked by default and "
                "always needs written approval from the CFO before the ticket is bought.",
            ),
            (
                "Does my trip need approval?",
                "Domestic trips need your manager's approval in the portal. Trips outside the "
                "Nordic countries also need approval from your department head, at least 10 "
                "working days before departure.",
            ),
            (
                "Can I get money in advance?",
                "Yes. You can request a travel advance of up to 5,000 NOK per trip. Requests must "
                "reach finance at least 5 working days before you leave. The advance is settled "
                "against your expense report.",
            ),
        ],
    ),
    (
        "Per diem and meals",
        [
            (
                "What is the per diem for trips in Norway?",
                "For a domestic day trip lasting 6 to 12 hours the per diem is 450 NOK. A day "
                "trip longer than 12 hours gives 620 NOK. When the trip includes an overnight "
                "stay, the per diem is 780 NOK per day.",
            ),
            (
                "What is the per diem abroad?",
                "Trips abroad are reimbursed in euro, at the daily rates in the table below. The "
                "table also gives the most we pay for a hotel night in each country. For "
                "countries that are not listed, contact finance before you travel.",
            ),
            (None, ""),
            (
                "What if meals are provided?",
                "When a meal is included, for example at a conference or in the hotel price, the "
                "per diem is reduced: by 20 % for breakfast, 30 % for lunch and 50 % for dinner.",
            ),
            (
                "Are contractors paid per diem?",
                "No. Contractors and consultants are not eligible for per diem; their travel "
                "costs are covered as their contract states.",
            ),
        ],
    ),
    (
        "Transport",
        [
            (
                "Can I use my own car?",
                "Yes, when it is cheaper or much more practical than public transport. Mileage is "
                "reimbursed at 3.50 NOK per km, plus 1 NOK per km for each colleague who travels "
                "with you. Electric cars get the same rate. Tolls and ferries are reimbursed "
                "against receipts; parking fines are not.",
            ),
            (
                "When may I take a taxi?",
                "Take a taxi when public transport is not a reasonable option, when you carry "
                "heavy equipment, or when you travel between 23:00 and 06:00. To and from Oslo "
                "Airport, use the airport express train.",
            ),
        ],
    ),
    (
        "Expense reports",
        [
            (
                "How soon must I submit my expenses?",
                "Submit your expense report in the ExpenseHub app within 30 days after you "
                "return. Reports submitted later are paid only with your department head's "
                "approval. Approved expenses are paid with the next salary.",
            ),
            (
                "Which receipts do I need?",
                "A photo of the receipt is needed for every expense above 200 NOK. Keep paper "
                "receipts for three months after submitting, in case finance asks for them.",
            ),
            (
                "What is not reimbursed?",
                "Alcohol, minibar purchases, in-flight entertainment and upgrades that you choose "
                "yourself are not reimbursed. Laundry is reimbursed only on trips longer than 5 "
                "nights.",
            ),
            (
                "Am I insured when I travel?",
                "Yes. All employees on business travel are covered by the company travel "
                "insurance from Nordtrygg. Carry the insurance card from the intranet, and call "
                "the emergency number on the card if you fall ill abroad. Private trips "
                "added before or after a business trip are not covered.",
            ),
        ],
    ),
]
PER_DIEM_HEADER = ("Country", "Per diem (EUR per day)", "Hotel cap (EUR per night)")
PER_DIEM_ROWS = [
    ("Sweden", "62", "160"),
    ("Denmark", "70", "175"),
    ("Finland", "66", "165"),
    ("Estonia", "45", "110"),
    ("Germany", "58", "150"),
    ("Netherlands", "65", "170"),
    ("United Kingdom", "74", "210"),
    ("United States", "80", "240"),
]

REPORT_TITLE = "Customer Support Report, Q3 2024"
REPORT_PARAGRAPHS = [
    "Prepared by Maja Lindqvist, Support Team Lead, for the product steering group. The report "
    "covers tickets from customers of the VM-40 vibration monitor and the SG-2 gateway handled "
    "by the support team in Trondheim between 1 July and 30 September 2024.",
    "Summary. The team handled 4,035 tickets in the quarter, 18 % more than in Q2. Volume rose "
    "every month as the VM-40 rollout at two large hydropower customers went ahead. Customer "
    "satisfaction recovered in September after a weak August, and the backlog at the end of "
    "the quarter was the lowest this year.",
    "The table below shows the monthly figures. Median first response is measured in business "
    "hours; CSAT is the average score on a scale from 1 to 5; backlog is the number of open "
    "tickets on the last day of the month.",
]
REPORT_HEADER = ("Month", "Tickets", "Median first response (h)", "CSAT", "Backlog")
REPORT_ROWS = [
    ("July", "1,184", "3.2", "4.4", "212"),
    ("August", "1,342", "5.1", "4.1", "265"),
    ("September", "1,509", "2.7", "4.6", "198"),
]
REPORT_MORE = [
    "August. First response times missed the target in August, when four of the nine agents "
    "were on summer holiday at the same time. Our target is a first response within 4 business "
    "hours for Premium customers and within 8 business hours for Standard customers. Three new "
    "agents started on 19 August, bringing the team to 12 agents.",
    "What customers asked about. Pairing sensors with the SG-2 gateway was the largest "
    "category, with 31 % of all tickets, followed by battery questions (17 %) and app login "
    "problems (12 %). Firmware 2.4.1, released on 12 September, fixed the Bluetooth pairing "
    "fault behind most pairing tickets, which explains much of the improvement in September.",
    "Escalations. 87 tickets were escalated to engineering during the quarter. The median time "
    "to resolve an escalated ticket was 6 working days. No security incidents were reported "
    "through support.",
    "Customer comments. Customers who gave a score of 4 or 5 most often mentioned fast "
    "answers and clear instructions. Low scores most often mentioned waiting for a reply in "
    "August and having to explain the same problem twice after a ticket was handed over. "
    "From October, a handed-over ticket keeps a written summary at the top, so the next agent "
    "does not have to ask the customer again.",
    "Channels. E-mail remained the main channel with 64 % of tickets, the web form brought 25 % "
    "and phone 11 %. Phone calls were answered within 90 seconds on average. Tickets from the "
    "German distributor are still handled in English; a German-speaking agent is not planned "
    "before 2025.",
    "Self-service. The team published 46 new knowledge base articles. About 14 % of visitors "
    "who opened the help centre did not go on to create a ticket.",
    "Plans for Q4. The goals for Q4 are a CSAT of at least 4.5 every month and a backlog below "
    "200 tickets. Chat support in Swedish will be piloted from 1 November, staffed from "
    "Trondheim. Phone support hours stay at 08:00 to 16:00 CET on weekdays.",
]


def build_docx(path: Path) -> None:
    faq_docx(
        path,
        FAQ_TITLE,
        "Skarvik Instruments AS, Finance",
        FAQ_INTRO,
        FAQ_SECTIONS,
        (PER_DIEM_HEADER, PER_DIEM_ROWS),
        WRITTEN,
    )


def build_pdf(path: Path) -> None:
    pdf = titled_pdf(REPORT_TITLE, "Skarvik Instruments AS, Customer Support", WRITTEN)
    pdf.set_font("Helvetica", size=11)
    for paragraph in REPORT_PARAGRAPHS:
        pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    with pdf.table(col_widths=(30, 25, 55, 20, 25), text_align="LEFT") as table:
        for row in (REPORT_HEADER, *REPORT_ROWS):
            cells = table.row()
            for text in row:
                cells.cell(text)
    pdf.ln(4)
    for paragraph in REPORT_MORE:
        pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    pdf.output(str(path))


def main() -> None:
    DOCUMENTS.mkdir(parents=True, exist_ok=True)
    build_docx(DOCUMENTS / "travel-expenses-faq.docx")
    build_pdf(DOCUMENTS / "quarterly-support-report.pdf")


if __name__ == "__main__":
    main()
